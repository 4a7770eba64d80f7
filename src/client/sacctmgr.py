"""sacctmgr: view and change the accounting database (accounts, users, associations, QOS).

``sacctmgr [-i] [-n] [-p|-P] add|modify|delete|list|show ENTITY [names] [where ...]
[set ...] [format=...]`` as Slurm's. ctld parses the words after the entity (names,
``key=value``, ``where``, ``set``) and answers with Slurm's messages, or with records
whose columns this command lays out as Slurm's ``print_fields`` does: each column right
justified in its width, a value too long cut with ``+``; ``-p`` and ``-P`` for ``|``
separated output. Changes are committed at once, as with ``-i`` (there is no
confirmation prompt). ``format_records`` is pure, for tests.
"""

from __future__ import annotations

import sys

from client.common import client, run
from client.options import FLAG, Option, OptionParser, answered

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

PROG = "sacctmgr"

# (aliases, header, width): what format= may name; a word matches an alias exactly, or
# else the first alias (in this order) it begins
FIELDS: tuple[tuple[tuple[str, ...], str, int], ...] = (
    (("account", "acct"), "Account", 10),
    (("adminlevel", "admin"), "Admin", 9),
    (("cluster",), "Cluster", 10),
    (("defaultaccount", "defacct", "def acct"), "Def Acct", 10),
    (("defaultqos", "defqos", "def qos"), "Def QOS", 9),
    (("description", "descr"), "Descr", 20),
    (("flags",), "Flags", 20),
    (("gracetime",), "GraceTime", 10),
    (("grpjobs",), "GrpJobs", 7),
    (("grpsubmitjobs", "grpsubmit"), "GrpSubmit", 9),
    (("grptres",), "GrpTRES", 13),
    (("grptresmins",), "GrpTRESMins", 13),
    (("grptresrunmins",), "GrpTRESRunMins", 13),
    (("grpwall",), "GrpWall", 11),
    (("maxjobs",), "MaxJobs", 7),
    (("maxjobsperaccount", "maxjobspa"), "MaxJobsPA", 9),
    (("maxjobsperuser", "maxjobspu"), "MaxJobsPU", 9),
    (("maxsubmitjobs", "maxsubmit"), "MaxSubmit", 9),
    (("maxsubmitjobsperaccount", "maxsubmitpa"), "MaxSubmitPA", 11),
    (("maxsubmitjobsperuser", "maxsubmitpu"), "MaxSubmitPU", 11),
    (("maxtres", "maxtresperjob"), "MaxTRES", 13),
    (("maxtresmins",), "MaxTRESMins", 13),
    (("maxtrespernode",), "MaxTRESPerNode", 14),
    (("maxtresperaccount", "maxtrespa"), "MaxTRESPA", 13),
    (("maxtresperuser", "maxtrespu"), "MaxTRESPU", 13),
    (("maxwall", "maxwalldurationperjob"), "MaxWall", 11),
    (("mintres",), "MinTRES", 13),
    (("name",), "Name", 10),
    (("organization", "org"), "Org", 20),
    (("parentname", "parent"), "ParentName", 10),
    (("partition",), "Partition", 10),
    (("preemptmode",), "PreemptMode", 11),
    (("preempt",), "Preempt", 10),
    (("preemptexempttime",), "PreemptExemptTime", 19),
    (("priority",), "Priority", 10),
    (("qos", "qoslevel"), "QOS", 20),
    (("share", "fairshare"), "Share", 9),
    (("user",), "User", 10),  # before Usage*: "U" is User, as in Slurm
    (("usagefactor",), "UsageFactor", 11),
    (("usagethreshold", "usagethres"), "UsageThres", 10),
)

DEFAULT_FORMAT = {
    "account": "Account,Descr,Org",
    "user": "User,DefaultAccount,Admin",
    "assoc": (
        "Cluster,Account,User,Partition,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,GrpWall,"
        "GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,MaxWall,MaxTRESMins,QOS,"
        "DefaultQOS,GrpTRESRunMins"
    ),
    "qos": (
        "Name,Priority,GraceTime,Preempt,PreemptExemptTime,PreemptMode,Flags%40,UsageThres,"
        "UsageFactor,GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpJobs,GrpSubmit,GrpWall,MaxTRES,"
        "MaxTRESPerNode,MaxTRESMins,MaxWall,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxTRESPA,"
        "MaxJobsPA,MaxSubmitPA,MinTRES"
    ),
}
ENTITIES = {
    "account": "account",
    "accounts": "account",
    "acct": "account",
    "user": "user",
    "users": "user",
    "association": "assoc",
    "associations": "assoc",
    "assoc": "assoc",
    "assocs": "assoc",
    "qos": "qos",
}
ACTIONS = {
    "add": "add",
    "create": "add",
    "modify": "modify",
    "update": "modify",
    "delete": "delete",
    "remove": "delete",
    "list": "list",
    "show": "list",
}


class BadFormat(Exception):
    pass


def parse_fields(spec: str) -> list[tuple[str, int]]:
    """``Account,GrpTRES%30`` -> [(header, width)]; a negative width left-justifies."""
    out: list[tuple[str, int]] = []
    for word in (w for w in spec.split(",") if w.strip()):
        name, _, width = word.strip().partition("%")
        low = name.lower()
        found = next((f for f in FIELDS if low in f[0]), None)
        if found is None and len(low) >= 1:
            found = next((f for f in FIELDS if any(a.startswith(low) for a in f[0])), None)
        if found is None:
            raise BadFormat(f"Invalid field requested: {name}")
        try:
            size = int(width) if width else found[2]
        except ValueError:
            raise BadFormat(f"Invalid field width: {word}") from None
        out.append((found[1], size))
    return out


def _cell(value: str, width: int) -> str:
    size = abs(width)
    if len(value) > size:
        value = value[: size - 1] + "+"
    return (value.rjust(size) if width >= 0 else value.ljust(size)) + " "


def format_records(
    records: Sequence[dict[str, str]],
    fields: Sequence[tuple[str, int]],
    *,
    parsable: str = "",  # "", "p" (a | after every field) or "P" (between fields)
    header: bool = True,
) -> str:
    lines: list[str] = []
    rows = [[name for name, _ in fields]] if header else []
    rows += [[r.get(name, "") for name, _ in fields] for r in records]
    if parsable:
        for i, row in enumerate(rows):
            lines.append("|".join(row) + ("|" if parsable == "p" else ""))
            del i
        return "".join(line + "\n" for line in lines)
    for i, row in enumerate(rows):
        lines.append("".join(_cell(v, w) for v, (_, w) in zip(row, fields, strict=True)))
        if header and i == 0:
            lines.append("".join("-" * abs(w) + " " for _, w in fields))
    return "".join(line + "\n" for line in lines)


OPTIONS = (
    Option("i", "immediate", "immediate", FLAG, help="commit changes at once (always so)"),
    Option("n", "noheader", "noheader", FLAG, help="no header lines"),
    Option("P", "parsable2", "parsable2", FLAG, help="'|' between fields"),
    Option("p", "parsable", "parsable", FLAG, help="'|' after every field"),
    Option("Q", "quiet", "quiet", FLAG, help="print no messages, only errors"),
    Option("s", "associations", "withassoc", FLAG, help="(accepted; use show assoc)"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)
USAGE = (
    f"{PROG} [OPTIONS] add|modify|delete|list|show account|user|association|qos "
    "[NAMES] [where CONDITIONS] [set SETTINGS] [format=FIELDS]"
)


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=USAGE)
    opts, rest = parser.parse(argv)
    if answered(parser, opts):
        return 0
    # options may also follow the command, as getopt permutes them for Slurm
    words: list[str] = []
    for word in rest:
        if word in ("-i", "--immediate"):
            continue
        if word in ("-n", "--noheader"):
            opts["noheader"] = True
        elif word in ("-P", "--parsable2"):
            opts["parsable2"] = True
        elif word in ("-p", "--parsable"):
            opts["parsable"] = True
        else:
            words.append(word)
    if not words:
        sys.stderr.write(parser.help_text())
        return 1
    action = ACTIONS.get(words[0].lower())
    if action is None:
        sys.stderr.write(f"invalid keyword: {words[0]}\n")
        return 1
    if len(words) < 2 or words[1].lower() not in ENTITIES:
        sys.stderr.write(
            f"No valid entity in {action} command\n"
            'Input line must include "Account", "Association", "QOS" or "User"\n'
        )
        return 1
    entity = ENTITIES[words[1].lower()]
    args: list[str] = []
    spec = ""
    for word in words[2:]:
        key, eq, value = word.partition("=")
        if eq and key.lower() == "format":
            spec = f"{spec},{value}" if spec else value
        else:
            args.append(word)
    try:
        fields = parse_fields(spec or DEFAULT_FORMAT[entity])
    except BadFormat as exc:
        sys.stderr.write(f" {exc}\n")
        return 1
    request: t.SacctmgrRequest = {"action": action, "entity": words[1], "args": args}
    from corral.errors import CorralError

    try:
        reply = client().sacctmgr(request)
    except CorralError as exc:
        message = exc.message
        sys.stderr.write(message if message.startswith(" ") else f" {message}")
        sys.stderr.write("\n")
        return exc.exit_code
    if action != "list":
        if reply.get("message") and not opts.get("quiet"):
            sys.stdout.write(reply.get("message", "") + "\n")
        return 0
    records = [dict(r.get("fields", {})) for r in reply.get("records", [])]
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else ""
    sys.stdout.write(
        format_records(records, fields, parsable=parsable, header=not opts.get("noheader"))
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
