"""sinfo: partitions and nodes in Slurm's views (summary, -N, -l, -R, -s, -o formats).

Nodes are grouped as Slurm groups them: one line per partition and per distinct value
of every node field the format shows (state, CPUs, ...), or one line per node with
-N. Output is a pure function of the GetPartitions and GetNodes replies
(``format_sinfo``).
"""

from __future__ import annotations

import sys

from client import nodepower
from client.common import client, run
from client.fieldmasks import chosen, sinfo_fields
from client.fmt import (
    Reported,
    Spec,
    all_letters,
    call,
    check_format,
    ctime,
    parse_format,
    render,
    split_list,
    with_width,
)
from client.options import FLAG, Option, OptionParser, parse_command
from client.sinfo_columns import (
    NODE_VALUES,
    PART_VALUES,
    REASON_STATES,
    STATE_NAMES,
    Group,
    columns,
    names,
    state_rank,
)
from client.views.node import Node, Partition
from corral import hostlist
from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from corral.wire import json_types as t

PROG = "sinfo"
MIN_FIELD = 9  # the narrowest PARTITION / NODELIST column Slurm sizes to fit

# (format, size PARTITION to fit, size NODELIST to fit) for each default view
VIEWS = {
    "default": ("%9P %.5a %.10l %.6D %.6t %N", True, False),
    "long": ("%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N", True, False),
    "node": ("%N %.6D %.9P %6t", True, True),
    "node_long": ("%N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E", True, True),
    "reasons": ("%20E %9u %19H %N", False, False),
    "reasons_long": ("%20E %12U %19H %6t %N", False, False),
    "summary": ("%9P %.5a %.10l %.16F %N", True, False),
}

# ---------------------------------------------------------------- grouping


def group_nodes(
    partitions: Sequence[Partition],
    nodes: Sequence[Node],
    letters: set[str],
    *,
    per_node: bool = False,
    by_partition: bool = True,
    keep: Callable[[Node], bool] = lambda n: True,
) -> list[Group]:
    """Lines in Slurm's order: partitions as configured, nodes as listed; nodes share
    a line when every shown node field has the same value for them."""
    by_name = {n.name: n for n in nodes}
    node_keys = sorted(letters & set(NODE_VALUES))
    part_keys = sorted(letters & set(PART_VALUES))
    groups: dict[tuple[str, ...], Group] = {}
    for part in partitions:
        members = [by_name[x] for x in hostlist.expand(part.nodes) if x in by_name]
        if by_partition:
            head: tuple[str, ...] = (part.name,)
        else:
            head = tuple(PART_VALUES[k](part) for k in part_keys)
        if not members and by_partition and not per_node:
            groups.setdefault(("", *head), Group(part))  # a partition shows even when empty
        for node in filter(keep, members):
            key = head + tuple(NODE_VALUES[k](node) for k in node_keys)
            if per_node:
                key += (node.name,)
            groups.setdefault(key, Group(part)).add(node)
    return sort_groups(list(groups.values()), partitions, list(by_name), per_node)


def sort_groups(
    groups: list[Group], partitions: Sequence[Partition], node_order: list[str], per_node: bool
) -> list[Group]:
    """Slurm's default orders: by node with -N, else ``#P,-t`` (partitions as
    configured, then node state, highest first)."""
    if per_node:
        rank = {name: i for i, name in enumerate(node_order)}
        return sorted(groups, key=lambda g: rank.get(g.nodes[0].name, 0))
    by_state = sorted(groups, key=lambda g: state_rank(g.nodes[0]) if g.nodes else -1, reverse=True)
    part_rank = {p.name: i for i, p in enumerate(partitions)}
    return sorted(by_state, key=lambda g: part_rank.get(g.part.name if g.part else "", 0))


def format_sinfo(
    partitions: Sequence[t.Partition],
    nodes: Sequence[t.Node],
    now: float,
    *,
    fmt: str | None = None,
    view: str = "default",
    header: bool = True,
    long_date: bool = False,
    keep: Callable[[t.Node], bool] = lambda n: True,
) -> str:
    """The whole output (with newlines) for one view, or for a ``-o`` format."""
    default, size_part, size_nodes = VIEWS[view]
    if fmt and fmt.lower() == "%all":
        fmt = all_letters(columns(0), upper_suffix=" ")
    prefix, specs = parse_format(fmt or default)
    if fmt:
        size_part = size_nodes = False
    letters = {s.letter for s in specs}
    check_format(specs, columns(0), "node")
    per_node = view in ("node", "node_long")
    reasons = view in ("reasons", "reasons_long")
    groups = group_nodes(
        [Partition(p) for p in partitions],
        [Node(n) for n in nodes],
        letters,
        per_node=per_node,
        by_partition=("P" in letters or "R" in letters) and not reasons,
        keep=lambda n: keep(n.raw) and (not reasons or n.state_name in REASON_STATES),
    )
    specs = _sized(specs, groups, size_part, size_nodes)
    part_width = next((s.width for s in specs if s.letter == "P"), 0)
    cols = columns(part_width)
    lines = [ctime(now)] if long_date and header else []
    if header:
        lines.append(render(prefix, specs, cols, None))
    lines.extend(render(prefix, specs, cols, g) for g in groups)
    return "".join(line + "\n" for line in lines)


def _sized(specs: list[Spec], groups: list[Group], part: bool, nodes: bool) -> list[Spec]:
    """Widen PARTITION and NODELIST to their longest value, as Slurm's default views."""
    if part:
        widths = [len(g.part.name) + g.part.is_default for g in groups if g.part is not None]
        specs = with_width(specs, "P", max([MIN_FIELD, *widths]))
    if nodes:
        widths = [len(hostlist.compress(names(g))) for g in groups]
        specs = with_width(specs, "N", max([MIN_FIELD, *widths]))
    return specs


# ---------------------------------------------------------------- command line

OPTIONS = (
    Option("h", "noheader", "noheader", FLAG, help="no header line"),
    Option("l", "long", "long", FLAG, help="more columns, with a date line"),
    Option("N", "Node", "node", FLAG, help="one line per node"),
    Option("n", "nodes", "nodes", help="only these nodes (hostlist)"),
    Option("o", "format", "format", help="output format (%[.][size]type)"),
    Option("p", "partition", "partition", help="only these partitions"),
    Option("R", "list-reasons", "reasons", FLAG, help="why nodes are down, drained or failing"),
    Option("s", "summarize", "summarize", FLAG, help="one line per partition"),
    Option("t", "states", "states", help="only nodes in these states"),
    Option("a", "all", "all", FLAG, help="(no effect: every partition is shown)"),
    Option("v", "verbose", "verbose", FLAG, help="(accepted for compatibility)"),
    Option("", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def choose_view(opts: dict[str, Any]) -> str:
    long = "_long" if opts.get("long") else ""
    if opts.get("summarize"):
        return "summary"
    if opts.get("node"):
        return "node" + long
    if opts.get("reasons"):
        return "reasons" + long
    return "long" if long else "default"


def node_filter(opts: dict[str, Any]) -> Callable[[t.Node], bool]:
    names: set[str] | None = None
    if opts.get("nodes"):
        names = set(hostlist.expand(opts["nodes"]))
    states: set[str] | None = None
    if opts.get("states"):
        states = set()
        for item in split_list(opts["states"]):
            if item.lower() not in STATE_NAMES:
                raise InvalidOption(f"Bad node state specification: {item}")
            states |= STATE_NAMES[item.lower()]

    def keep(raw: t.Node) -> bool:
        node = Node(raw)
        return (names is None or node.name in names) and (
            states is None or node.state_name in states or nodepower.matches(node, states)
        )

    return keep


def format_letters(fmt: str) -> list[str]:
    """The letters ``fmt`` prints (its field mask's)."""
    if fmt.lower() == "%all":
        fmt = all_letters(columns(0), upper_suffix=" ")
    return [s.letter for s in parse_format(fmt)[1]]


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    request: t.GetPartitionsRequest = {}
    if opts.get("partition"):
        request["names"] = split_list(opts["partition"])
    view = choose_view(opts)
    nodes_request: t.GetNodesRequest = {}
    fields = chosen(sinfo_fields(format_letters(opts.get("format") or VIEWS[view][0])))
    if fields:
        nodes_request["fields"] = fields
    try:
        partitions = call(lambda: api.get_partitions(request), "slurm_load_partitions")
        reply = call(lambda: api.get_nodes(nodes_request), "slurm_load_node")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(
        format_sinfo(
            partitions.get("partitions", []),
            reply.get("nodes", []),
            float(reply.get("now") or 0),
            fmt=opts.get("format"),
            view=view,
            header=not opts.get("noheader"),
            long_date=bool(opts.get("long")),
            keep=node_filter(opts),
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]), listing=True)


if __name__ == "__main__":
    main()
