"""sinfo's columns: the value of each ``-o`` letter for a line's nodes (read from the
typed ``Node`` views) or its partition (``Partition``), Slurm's state names, and the
line (``Group``) they are read from."""

from __future__ import annotations

from client import nodepower
from client.fmt import Column, node_gres
from client.views.node import Node, Partition
from corral import hostlist, nodewords
from corral.slurmfmt import format_duration, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

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

    def __init__(self, part: Partition | None) -> None:
        self.part = part
        self.nodes: list[Node] = []
        self.names: set[str] = set()

    def add(self, node: Node) -> None:
        name = node.name
        if name not in self.names:  # a node in two merged partitions counts once
            self.names.add(name)
            self.nodes.append(node)


# ---------------------------------------------------------------- node values


def sct(node: Node) -> str:
    r = node.resources
    return f"{r.sockets}:{r.cores_per_socket}:{r.threads_per_core}"


def _state_word(node: Node, form: int) -> str:
    """Short (0) or long (1), with Slurm's '*' for a late heartbeat (idle*, mix*), or
    the power suffix in its place (idle~, down~: client/nodepower.py), or '$' in a
    MAINT reservation (mix$); an idle node in a reservation, or a spare, in its own
    words (maint, resv, spare: corral/nodewords.py)."""
    state = node.state_name
    reserved = nodewords.reserved_state(state, node.reservation, node.maint, node.spare)
    name = str((reserved or STATES.get(state, ("unk", "unknown", 0)))[form])
    if nodewords.maint_marked(state, node.reservation, node.maint):
        return name.rstrip("*") + nodewords.MAINT_SUFFIX
    late = name + "*" if node.not_responding and not name.endswith("*") else name
    return nodepower.suffixed(node, name, late)


def short_state(node: Node) -> str:
    return _state_word(node, 0)


def long_state(node: Node) -> str:
    return _state_word(node, 1)


def state_rank(node: Node) -> int:
    return STATES.get(node.state_name, ("", "", 0))[2]


def reason_user(node: Node, with_uid: bool) -> str:
    if not node.reason:
        return "Unknown"
    user = node.reason_user or "root"  # ctld's own reasons are root's
    return f"{user}({node.reason_uid})" if with_uid else user


def address(node: Node) -> str:
    return node.address.rpartition(":")[0] or node.name


#: node letters: the value of one node (nodes of a line share it)
NODE_VALUES: dict[str, Callable[[Node], str]] = {
    "b": lambda n: ",".join(n.resources.features) or "(null)",  # all are active
    "d": lambda n: "0",
    "E": lambda n: n.reason or "none",
    "f": lambda n: ",".join(n.resources.features) or "(null)",
    "G": node_gres,
    "H": lambda n: format_timestamp(n.reason_time),
    "O": lambda n: "N/A",
    "e": lambda n: "N/A",
    "t": short_state,
    "T": long_state,
    "u": lambda n: reason_user(n, False),
    "U": lambda n: reason_user(n, True),
    "v": lambda n: n.version or "N/A",
    "w": lambda n: "1",
    "X": lambda n: str(n.resources.sockets),
    "Y": lambda n: str(n.resources.cores_per_socket),
    "Z": lambda n: str(n.resources.threads_per_core),
    "z": sct,
}


def min_max(values: Iterable[int]) -> str:
    """One figure, or ``min+`` where the nodes of a line differ (Slurm's CPUS, MEMORY)."""
    seen = list(values)
    if not seen:
        return "0"
    low, high = min(seen), max(seen)
    return str(low) if low == high else f"{low}+"


def cpus_aiot(nodes: list[Node]) -> str:
    alloc = idle = other = total = 0
    for n in nodes:
        cpus, used = n.resources.cpus, n.alloc_cpus
        total += cpus
        alloc += used
        if n.state_name in UNUSABLE:
            other += max(0, cpus - used)
        else:
            idle += max(0, cpus - used)
    return f"{alloc}/{idle}/{other}/{total}"


def nodes_aiot(nodes: list[Node]) -> str:
    states = [n.state_name for n in nodes]
    alloc = sum(s in ("ALLOCATED", "MIXED") for s in states)
    idle = sum(s == "IDLE" for s in states)
    return f"{alloc}/{idle}/{len(states) - alloc - idle}/{len(states)}"


# ---------------------------------------------------------------- partition values


def part_label(part: Partition | None, width: int) -> str:
    """The partition name, ``*`` marking the default one (over its last letter if the
    column is too narrow, as Slurm)."""
    if part is None:
        return "n/a"
    name = part.name
    if part.is_default:
        name = name + "*" if width == 0 or len(name) < width else name[: width - 1] + "*"
    return name


def max_time(part: Partition) -> str:
    limit = part.max_time_s
    return "infinite" if limit < 0 else format_duration(limit)


def default_time(part: Partition) -> str:
    limit = part.default_time_s
    return "n/a" if limit < 0 else format_duration(limit)


def job_size(part: Partition) -> str:
    top = part.max_nodes
    if not top:
        return "1-infinite"
    return "1" if top == 1 else f"1-{top}"


#: partition letters: the value of the line's partition
PART_VALUES: dict[str, Callable[[Partition], str]] = {
    "a": lambda p: AVAIL.get(p.state, "unk"),
    "B": lambda p: "UNLIMITED",
    "g": lambda p: "all",
    "h": lambda p: "NO",
    "l": max_time,
    "L": default_time,
    "p": lambda p: str(p.priority_tier),
    "r": lambda p: "no",
    "R": lambda p: p.name,
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


def names(g: Group) -> list[str]:
    return [n.name for n in g.nodes]


def columns(part_width: int) -> dict[str, Column]:
    cols = {k: Column(_HEADERS[k], _node_value(k)) for k in NODE_VALUES}
    cols.update({k: Column(_HEADERS[k], _part_value(k)) for k in PART_VALUES})
    cols.update(
        {
            "P": Column("PARTITION", lambda g: part_label(g.part, part_width)),
            "c": Column("CPUS", lambda g: min_max(n.resources.cpus for n in g.nodes)),
            "m": Column("MEMORY", lambda g: min_max(n.resources.memory_mb for n in g.nodes)),
            "C": Column("CPUS(A/I/O/T)", lambda g: cpus_aiot(g.nodes)),
            "F": Column("NODES(A/I/O/T)", lambda g: nodes_aiot(g.nodes)),
            "D": Column("NODES", lambda g: str(len(g.nodes))),
            "N": Column("NODELIST", lambda g: hostlist.compress(names(g)), header_cut=False),
            "n": Column("HOSTNAMES", lambda g: hostlist.compress(names(g)), header_cut=False),
            "o": Column(
                "NODE_ADDR",
                lambda g: hostlist.compress([address(n) for n in g.nodes]),
                header_cut=False,
            ),
        }
    )
    return cols
