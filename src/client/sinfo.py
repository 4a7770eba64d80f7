"""sinfo: partitions and nodes in Slurm's views (summary, -N, -l, -R, -s, -o formats).

Nodes are grouped as Slurm groups them: one line per partition and per distinct value
of every node field the format shows (state, CPUs, ...), or one line per node with
-N. Output is a pure function of the GetPartitions and GetNodes replies
(``format_sinfo``).
"""

from __future__ import annotations

import sys

from client import nodepower
from client.common import client, node_state, num, real, run, text
from client.fmt import (
    Column,
    Reported,
    Spec,
    all_letters,
    call,
    check_format,
    ctime,
    node_gres,
    parse_format,
    render,
    res,
    split_list,
    with_width,
)
from client.options import FLAG, Option, OptionParser, parse_command
from corral import hostlist
from corral.errors import InvalidOption
from corral.slurmfmt import format_duration, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from client.common import Json
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

# corral state -> (sinfo short form, sinfo long form, Slurm's numeric state for sorting).
# corral's DOWN and UNKNOWN get Slurm's '*'; a late node gets one too (idle*, mix*).
STATES = {
    "UNKNOWN": ("unk*", "unknown*", 0x800),
    "DOWN": ("down*", "down*", 0x801),
    "IDLE": ("idle", "idle", 2),
    "ALLOCATED": ("alloc", "allocated", 3),
    "MIXED": ("mix", "mixed", 5),
    "DRAIN": ("drain", "drained", 0x202),
    "DRAINING": ("drng", "draining", 0x203),
    "FAIL": ("fail", "fail", 0x2002),
}
UNUSABLE = frozenset({"UNKNOWN", "DOWN", "DRAIN", "DRAINING", "FAIL"})
#: The states -R lists (Slurm's "down,fail,drain").
REASON_STATES = frozenset({"DOWN", "DRAIN", "DRAINING", "FAIL"})
#: -t names (Slurm's long and short forms) -> corral states.
STATE_NAMES = {
    "idle": {"IDLE"},
    "alloc": {"ALLOCATED"},
    "allocated": {"ALLOCATED"},
    "mix": {"MIXED"},
    "mixed": {"MIXED"},
    "down": {"DOWN"},
    "drain": {"DRAIN", "DRAINING"},
    "drained": {"DRAIN"},
    "draining": {"DRAINING"},
    "drng": {"DRAINING"},
    "unk": {"UNKNOWN"},
    "unknown": {"UNKNOWN"},
    "fail": {"FAIL"},
    "no_respond": {"DOWN", "UNKNOWN"},
    "responding": {"IDLE", "ALLOCATED", "MIXED", "DRAIN", "DRAINING", "FAIL"},
    **nodepower.POWER_STATE_NAMES,
}
AVAIL = {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}


class Group:
    """One output line: a partition (the first one, where the view merges partitions)
    and its nodes."""

    __slots__ = ("names", "nodes", "part")

    def __init__(self, part: Json | None) -> None:
        self.part = part
        self.nodes: list[Json] = []
        self.names: set[str] = set()

    def add(self, node: Json) -> None:
        name = text(node, "name")
        if name not in self.names:  # a node in two merged partitions counts once
            self.names.add(name)
            self.nodes.append(node)


# ---------------------------------------------------------------- node values


def sct(node: Json) -> str:
    r = res(node)
    sockets, threads = num(r, "sockets", 1), num(r, "threadsPerCore", 1)
    return f"{sockets}:{num(r, 'coresPerSocket', num(r, 'cpus'))}:{threads}"


def _reserved(node: Json) -> tuple[str, str] | None:
    """An idle node in an active reservation: Slurm's maint / resv."""
    if node_state(node) != "IDLE" or not text(node, "reservation"):
        return None
    return ("maint", "maint") if node.get("maint") else ("resv", "reserved")


def _state_word(node: Json, form: int) -> str:
    """Short (0) or long (1), with Slurm's '*' for a late heartbeat (idle*, mix*), or
    the power suffix in its place (idle~, down~: client/nodepower.py)."""
    reserved = _reserved(node)
    name = str((reserved or STATES.get(node_state(node), ("unk", "unknown", 0)))[form])
    late = name + "*" if node.get("notResponding") and not name.endswith("*") else name
    return nodepower.suffixed(node, name, late)


def short_state(node: Json) -> str:
    return _state_word(node, 0)


def long_state(node: Json) -> str:
    return _state_word(node, 1)


def state_rank(node: Json) -> int:
    return STATES.get(node_state(node), ("", "", 0))[2]


def reason_user(node: Json, with_uid: bool) -> str:
    if not text(node, "reason"):
        return "Unknown"
    user = text(node, "reasonUser") or "root"  # ctld's own reasons are root's
    return f"{user}({num(node, 'reasonUid')})" if with_uid else user


def address(node: Json) -> str:
    return text(node, "address").rpartition(":")[0] or text(node, "name")


#: node letters: the value of one node (nodes of a line share it)
NODE_VALUES: dict[str, Callable[[Json], str]] = {
    "b": lambda n: "(null)",
    "d": lambda n: "0",
    "E": lambda n: text(n, "reason") or "none",
    "f": lambda n: "(null)",
    "G": node_gres,
    "H": lambda n: format_timestamp(real(n, "reasonTime")),
    "O": lambda n: "N/A",
    "e": lambda n: "N/A",
    "t": short_state,
    "T": long_state,
    "u": lambda n: reason_user(n, False),
    "U": lambda n: reason_user(n, True),
    "v": lambda n: text(n, "version") or "N/A",
    "w": lambda n: "1",
    "X": lambda n: str(num(res(n), "sockets", 1)),
    "Y": lambda n: str(num(res(n), "coresPerSocket", num(res(n), "cpus"))),
    "Z": lambda n: str(num(res(n), "threadsPerCore", 1)),
    "z": sct,
}


def min_max(values: Iterable[int]) -> str:
    """One figure, or ``min+`` where the nodes of a line differ (Slurm's CPUS, MEMORY)."""
    seen = list(values)
    if not seen:
        return "0"
    low, high = min(seen), max(seen)
    return str(low) if low == high else f"{low}+"


def cpus_aiot(nodes: list[Json]) -> str:
    alloc = idle = other = total = 0
    for n in nodes:
        cpus, used = num(res(n), "cpus"), num(n, "allocCpus")
        total += cpus
        alloc += used
        if node_state(n) in UNUSABLE:
            other += max(0, cpus - used)
        else:
            idle += max(0, cpus - used)
    return f"{alloc}/{idle}/{other}/{total}"


def nodes_aiot(nodes: list[Json]) -> str:
    states = [node_state(n) for n in nodes]
    alloc = sum(s in ("ALLOCATED", "MIXED") for s in states)
    idle = sum(s == "IDLE" for s in states)
    return f"{alloc}/{idle}/{len(states) - alloc - idle}/{len(states)}"


# ---------------------------------------------------------------- partition values


def part_label(part: Json | None, width: int) -> str:
    """The partition name, ``*`` marking the default one (over its last letter if the
    column is too narrow, as Slurm)."""
    if part is None:
        return "n/a"
    name = text(part, "name")
    if part.get("isDefault"):
        name = name + "*" if width == 0 or len(name) < width else name[: width - 1] + "*"
    return name


def max_time(part: Json) -> str:
    limit = num(part, "maxTimeS", -1)
    return "infinite" if limit < 0 else format_duration(limit)


def default_time(part: Json) -> str:
    limit = num(part, "defaultTimeS", -1)
    return "n/a" if limit < 0 else format_duration(limit)


def job_size(part: Json) -> str:
    top = num(part, "maxNodes")
    if not top:
        return "1-infinite"
    return "1" if top == 1 else f"1-{top}"


#: partition letters: the value of the line's partition
PART_VALUES: dict[str, Callable[[Json], str]] = {
    "a": lambda p: AVAIL.get(text(p, "state", "UP"), "unk"),
    "B": lambda p: "UNLIMITED",
    "g": lambda p: "all",
    "h": lambda p: "NO",
    "l": max_time,
    "L": default_time,
    "p": lambda p: str(num(p, "priorityTier", 1)),
    "r": lambda p: "no",
    "R": lambda p: text(p, "name"),
    "s": job_size,
    "S": lambda p: "all",
    "V": lambda p: "N/A",
}

_HEADERS = {
    "a": "AVAIL",
    "b": "ACTIVE_FEATURES",
    "B": "MAX_CPUS_PER_NODE",
    "c": "CPUS",
    "C": "CPUS(A/I/O/T)",
    "d": "TMP_DISK",
    "D": "NODES",
    "e": "FREE_MEM",
    "E": "REASON",
    "f": "AVAIL_FEATURES",
    "F": "NODES(A/I/O/T)",
    "g": "GROUPS",
    "G": "GRES",
    "h": "OVERSUBSCRIBE",
    "H": "TIMESTAMP",
    "l": "TIMELIMIT",
    "L": "DEFAULTTIME",
    "m": "MEMORY",
    "n": "HOSTNAMES",
    "N": "NODELIST",
    "o": "NODE_ADDR",
    "O": "CPU_LOAD",
    "p": "PRIO_TIER",
    "P": "PARTITION",
    "r": "ROOT",
    "R": "PARTITION",
    "s": "JOB_SIZE",
    "S": "ALLOCNODES",
    "t": "STATE",
    "T": "STATE",
    "u": "USER",
    "U": "USER",
    "v": "VERSION",
    "V": "CLUSTER",
    "w": "WEIGHT",
    "X": "SOCKETS",
    "Y": "CORES",
    "Z": "THREADS",
    "z": "S:C:T",
}


def _node_value(letter: str) -> Callable[[Group], str]:
    value = NODE_VALUES[letter]
    return lambda g: value(g.nodes[0]) if g.nodes else "n/a"


def _part_value(letter: str) -> Callable[[Group], str]:
    value = PART_VALUES[letter]
    return lambda g: value(g.part) if g.part is not None else "n/a"


def _names(g: Group) -> list[str]:
    return [text(n, "name") for n in g.nodes]


def columns(part_width: int) -> dict[str, Column]:
    cols = {k: Column(_HEADERS[k], _node_value(k)) for k in NODE_VALUES}
    cols.update({k: Column(_HEADERS[k], _part_value(k)) for k in PART_VALUES})
    cols.update(
        {
            "P": Column("PARTITION", lambda g: part_label(g.part, part_width)),
            "c": Column("CPUS", lambda g: min_max(num(res(n), "cpus") for n in g.nodes)),
            "m": Column("MEMORY", lambda g: min_max(num(res(n), "memoryMb") for n in g.nodes)),
            "C": Column("CPUS(A/I/O/T)", lambda g: cpus_aiot(g.nodes)),
            "F": Column("NODES(A/I/O/T)", lambda g: nodes_aiot(g.nodes)),
            "D": Column("NODES", lambda g: str(len(g.nodes))),
            "N": Column("NODELIST", lambda g: hostlist.compress(_names(g)), header_cut=False),
            "n": Column("HOSTNAMES", lambda g: hostlist.compress(_names(g)), header_cut=False),
            "o": Column(
                "NODE_ADDR",
                lambda g: hostlist.compress([address(n) for n in g.nodes]),
                header_cut=False,
            ),
        }
    )
    return cols


# ---------------------------------------------------------------- grouping


def group_nodes(
    partitions: Sequence[Json],
    nodes: Sequence[Json],
    letters: set[str],
    *,
    per_node: bool = False,
    by_partition: bool = True,
    keep: Callable[[Json], bool] = lambda n: True,
) -> list[Group]:
    """Lines in Slurm's order: partitions as configured, nodes as listed; nodes share
    a line when every shown node field has the same value for them."""
    by_name = {text(n, "name"): n for n in nodes}
    node_keys = sorted(letters & set(NODE_VALUES))
    part_keys = sorted(letters & set(PART_VALUES))
    groups: dict[tuple[str, ...], Group] = {}
    for part in partitions:
        members = [by_name[x] for x in hostlist.expand(text(part, "nodes")) if x in by_name]
        if by_partition:
            head: tuple[str, ...] = (text(part, "name"),)
        else:
            head = tuple(PART_VALUES[k](part) for k in part_keys)
        if not members and by_partition and not per_node:
            groups.setdefault(("", *head), Group(part))  # a partition shows even when empty
        for node in filter(keep, members):
            key = head + tuple(NODE_VALUES[k](node) for k in node_keys)
            if per_node:
                key += (text(node, "name"),)
            groups.setdefault(key, Group(part)).add(node)
    return sort_groups(list(groups.values()), partitions, list(by_name), per_node)


def sort_groups(
    groups: list[Group], partitions: Sequence[Json], node_order: list[str], per_node: bool
) -> list[Group]:
    """Slurm's default orders: by node with -N, else ``#P,-t`` (partitions as
    configured, then node state, highest first)."""
    if per_node:
        rank = {name: i for i, name in enumerate(node_order)}
        return sorted(groups, key=lambda g: rank.get(text(g.nodes[0], "name"), 0))
    by_state = sorted(groups, key=lambda g: state_rank(g.nodes[0]) if g.nodes else -1, reverse=True)
    part_rank = {text(p, "name"): i for i, p in enumerate(partitions)}
    return sorted(by_state, key=lambda g: part_rank.get(text(g.part or {}, "name"), 0))


def format_sinfo(
    partitions: Sequence[Json],
    nodes: Sequence[Json],
    now: float,
    *,
    fmt: str | None = None,
    view: str = "default",
    header: bool = True,
    long_date: bool = False,
    keep: Callable[[Json], bool] = lambda n: True,
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
        partitions,
        nodes,
        letters,
        per_node=per_node,
        by_partition=("P" in letters or "R" in letters) and not reasons,
        keep=(lambda n: keep(n) and node_state(n) in REASON_STATES) if reasons else keep,
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
        widths = [
            len(text(g.part, "name")) + bool(g.part.get("isDefault"))
            for g in groups
            if g.part is not None
        ]
        specs = with_width(specs, "P", max([MIN_FIELD, *widths]))
    if nodes:
        widths = [len(hostlist.compress(_names(g))) for g in groups]
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


def node_filter(opts: dict[str, Any]) -> Callable[[Json], bool]:
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

    def keep(node: Json) -> bool:
        return (names is None or text(node, "name") in names) and (
            states is None or node_state(node) in states or nodepower.matches(node, states)
        )

    return keep


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    request: t.GetPartitionsRequest = {}
    if opts.get("partition"):
        request["names"] = split_list(opts["partition"])
    try:
        partitions = call(lambda: api.get_partitions(request), "slurm_load_partitions")
        reply = call(lambda: api.get_nodes({}), "slurm_load_node")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(
        format_sinfo(
            partitions.get("partitions", []),
            reply.get("nodes", []),
            real(reply, "now"),
            fmt=opts.get("format"),
            view=choose_view(opts),
            header=not opts.get("noheader"),
            long_date=bool(opts.get("long")),
            keep=node_filter(opts),
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
