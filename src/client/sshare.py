"""sshare: the fair-share tree, its shares, usage and fair-share factors.

Columns as Slurm's default (Account, User, RawShares, NormShares, RawUsage,
EffectvUsage, FairShare; ``-l`` adds NormUsage), accounts indented by depth, ``-P``
for ``|``-separated output. Without ``-a`` or ``-u`` it shows the accounts and the
caller's own associations, as Slurm does. ``format_shares`` is pure, for tests.
"""

from __future__ import annotations

import sys

from client.common import client, run
from client.fmt import Reported, call, split_list
from client.options import FLAG, Option, OptionParser, parse_command
from client.views.accounting import ShareRow

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

PROG = "sshare"
# (header, width, right-justified)
COLUMNS = (
    ("Account", 20, False),
    ("User", 10, True),
    ("RawShares", 10, True),
    ("NormShares", 11, True),
    ("RawUsage", 11, True),
    ("EffectvUsage", 13, True),
    ("FairShare", 10, True),
)
LONG_EXTRA = ("NormUsage", 11, True)


def _cells(row: ShareRow, long: bool) -> list[str]:
    is_root = row.account == "root" and not row.user
    cells = [
        " " * row.depth + row.account,
        row.user,
        "" if is_root else str(row.raw_shares),
        f"{row.norm_shares:.6f}",
        str(round(row.raw_usage)),
        f"{row.effective_usage:.6f}",
        "" if is_root else f"{row.fairshare:.6f}",
    ]
    if long:
        cells.insert(5, f"{row.norm_usage:.6f}")
    return cells


def format_shares(
    reply: t.GetSharesResponse, *, long: bool = False, parsable: bool = False, header: bool = True
) -> str:
    columns = list(COLUMNS)
    if long:
        columns.insert(5, LONG_EXTRA)
    lines: list[str] = []
    if parsable:
        if header:
            lines.append("|".join(c[0] for c in columns) + "|")
        lines.extend("|".join(_cells(r, long)) + "|" for r in _rows(reply))
        return "".join(line + "\n" for line in lines)

    def fixed(cells: Sequence[str]) -> str:
        out = []
        for (_, width, right), cell in zip(columns, cells, strict=True):
            out.append(cell.rjust(width)[:width] if right else cell[:width].ljust(width))
        return " ".join(out) + " "

    if header:
        lines.append(fixed([c[0] for c in columns]))
        lines.append(" ".join("-" * c[1] for c in columns) + " ")
    lines.extend(fixed(_cells(r, long)) for r in _rows(reply))
    return "".join(line + "\n" for line in lines)


def _rows(reply: t.GetSharesResponse) -> list[ShareRow]:
    return [ShareRow(row) for row in reply.get("rows", [])]


OPTIONS = (
    Option("a", "all", "all", FLAG, help="all users"),
    Option("A", "accounts", "accounts", help="comma separated list of accounts"),
    Option("l", "long", "long", FLAG, help="more columns"),
    Option("n", "noheader", "noheader", FLAG, help="no header lines"),
    Option("P", "parsable2", "parsable", FLAG, help="'|' separated output"),
    Option("p", "parsable", "parsable", FLAG, help="'|' separated output"),
    Option("u", "users", "users", help="comma separated list of users"),
    Option("", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    request: t.GetSharesRequest = {}
    if opts.get("accounts"):
        request["accounts"] = split_list(opts["accounts"])
    if opts.get("users"):
        request["users"] = split_list(opts["users"])
    elif not opts.get("all"):
        request["users"] = [api.identity.user]
    try:
        reply = call(lambda: api.get_shares(request), "sshare")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(
        format_shares(
            reply,
            long=bool(opts.get("long")),
            parsable=bool(opts.get("parsable")),
            header=not opts.get("noheader"),
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
