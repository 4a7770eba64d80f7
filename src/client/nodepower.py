"""Power saving's words in sinfo and scontrol, as Slurm 22.05 shows them: the state
suffixes (``idle~`` powered down, ``idle#`` powering up, ``idle%`` powering down,
``mix!`` pending power down), scontrol's ``+POWERED_DOWN``-style flags, ``-t`` names,
and ``scontrol power up|down NODELIST``."""

from __future__ import annotations

TYPE_CHECKING = False  # typing and collections cost every command's start-up
if TYPE_CHECKING:
    from collections.abc import Sequence

    from client.views.node import Node

#: the power flag's suffix; it takes the place of the not-responding '*' (down~)
POWER_SUFFIX = {
    "NODE_POWER_POWERED_DOWN": "~",
    "NODE_POWER_POWERING_UP": "#",
    "NODE_POWER_POWERING_DOWN": "%",
}
#: sinfo -t's power names (matched against ``power_name``, not the base state)
POWER_STATE_NAMES = {
    "powered_down": {"POWERED_DOWN"},
    "powering_up": {"POWERING_UP"},
    "powering_down": {"POWERING_DOWN"},
    "power_down": {"POWER_DOWN"},
    "cloud": {"CLOUD"},
}
#: scontrol update NodeName=... State=
NODE_UPDATE_STATES = frozenset(
    {"DRAIN", "RESUME", "UNDRAIN", "DOWN", "POWER_UP", "POWER_DOWN"}
    | {"POWER_DOWN_ASAP", "POWER_DOWN_FORCE"}
)


def power_name(node: Node) -> str:
    """POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN (pending) or ""."""
    power = node.power
    if power in POWER_SUFFIX:
        return power.removeprefix("NODE_POWER_")
    return "POWER_DOWN" if node.power_down_pending else ""


def matches(node: Node, states: set[str]) -> bool:
    """Whether sinfo -t's power names (or CLOUD) select ``node``."""
    return power_name(node) in states or ("CLOUD" in states and node.cloud)


def suffixed(node: Node, name: str, late: str) -> str:
    """``name`` (a short or long state) with the power suffix, else ``late`` (its '*')."""
    suffix = POWER_SUFFIX.get(node.power, "!" if node.power_down_pending else "")
    return name.rstrip("*") + suffix if suffix else late


def flags(node: Node) -> str:
    """scontrol's State= flags: +CLOUD, +POWERED_DOWN, +POWERING_UP, ..."""
    out = "+CLOUD" if node.cloud else ""
    out += "+DYNAMIC_NORM" if node.dynamic else ""
    power = power_name(node)
    return out + (f"+{power}" if power else "")


def power(words: Sequence[str]) -> int:
    """scontrol power up|down [asap|force] NODELIST."""
    from client.common import client

    names, state = power_command(words)
    client().update_node({"names": names, "state": state})
    return 0


def power_command(words: Sequence[str]) -> tuple[list[str], str]:
    """``scontrol power up|down [asap|force] NODELIST``: the nodes and the State= it is."""
    from client.fmt import Reported
    from corral import hostlist
    from corral.errors import CorralError

    if len(words) < 2 or words[0].lower() not in ("up", "down"):
        raise Reported("Usage: scontrol power {up|down [asap|force]} NODELIST")
    state = "POWER_UP" if words[0].lower() == "up" else "POWER_DOWN"
    rest = list(words[1:])
    if state == "POWER_DOWN" and rest[0].lower() in ("asap", "force") and len(rest) > 1:
        state += "_" + rest.pop(0).upper()
    if len(rest) != 1:
        raise Reported("Usage: scontrol power {up|down [asap|force]} NODELIST")
    try:
        return hostlist.expand(rest[0]), state
    except CorralError as exc:
        raise Reported(f"Invalid node name specified: {rest[0]} ({exc})") from None
