"""The node state machine: the only place a node's state (its flags and reason) changes.

Beside ``jobstate`` (the job's), and applied like it only by the commit step
(``ctld/commit.py``): every change is a named event with a cause (the RPC, report or
monitor that made it), kept as the node's last change, and as the change that set
its reason (a drain's or a DOWN's cause is stored with its row): ``corral why NODE``
shows both. An event applied where it cannot apply raises InvalidTransition: that is
a bug in ctld, never a user error (callers that take a request, e.g. scontrol's
RESUME of a node that is up, check first).

    UNKNOWN --registered--> up (IDLE, MIXED, ALLOCATED: by its jobs)
    up --late--> up* (NOT_RESPONDING) --heard--> up
    up, up* --heartbeat_lost--> DOWN* --registered--> up
    any --downed--> DOWN (an operator's: it outlives a restart, and a registration)
    DOWN --resumed--> UNKNOWN (it registers again, and is fenced then)
    any --drained--> +DRAIN --undrained--> -DRAIN   (beside the above: DRAINING, DRAINED)
    registered --fencing--> +fencing (back with jobs it may not keep) --fenced--> -fencing
"""

from __future__ import annotations

from collections.abc import Callable

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb
from ctld.nodes import NodeEvent, NodeRecord
from ctld.store_rows import NodeDrain

NOT_RESPONDING = "Not responding"

# what a registration brings (the rest of a registration is the machine's own)
REGISTRATION = frozenset(
    {"address", "agent_address", "stream_address", "instance", "resources"}
    | {"boot_time", "version", "os"}
)
# the fields this machine owns: nothing else writes them (tests/unit/test_commit_path.py)
FIELDS = REGISTRATION | frozenset(
    {"registered", "responding", "down", "late", "admin_down", "fencing", "drain"}
    | {"reason", "reason_time", "reason_user", "reason_uid", "restarted_at", "last"}
    | {"reason_change"}
)


# event -> whether it may apply to the node as it stands
EVENTS: dict[str, Callable[[NodeRecord], bool]] = {
    "registered": lambda n: True,
    "late": lambda n: n.registered and not n.down and not n.late,
    "heard": lambda n: n.late,
    "heartbeat_lost": lambda n: not n.down,
    "downed": lambda n: True,  # again: the operator's new reason
    "resumed": lambda n: n.down,
    "drained": lambda n: True,  # again: the operator's new reason
    "undrained": lambda n: n.drain,
    "fencing": lambda n: n.registered and not n.fencing,
    "fenced": lambda n: n.fencing,
}


def may(node: NodeRecord, event: str) -> bool:
    return EVENTS[event](node)


def transition(
    node: NodeRecord,
    event: str,
    *,
    cause: str,
    now: float,
    detail: str = "",
    reason: str = "",
    user: str = "root",
    uid: int = 0,
    **registration: object,
) -> NodeEvent:
    """Apply ``event`` to ``node``: ``reason`` (by ``user``) for a drain or an operator's
    DOWN, or a lost heartbeat's own; ``registration``: what a registering noded sent."""
    allowed = EVENTS.get(event)
    if allowed is None:
        raise InvalidTransition(f"node {node.name}: unknown event {event!r} (cause {cause})")
    if not allowed(node):
        raise InvalidTransition(
            f"node {node.name}: event {event!r} is impossible in state "
            f"{pb.NodeState.Name(node.state)} (cause {cause})"  # type: ignore[arg-type]
        )
    if set(registration) - REGISTRATION or (registration and event != "registered"):
        raise InvalidTransition(f"node {node.name}: {event!r} cannot set {sorted(registration)}")
    had = (node.reason, node.reason_time)
    _EFFECTS[event](node, now, reason, user, uid, registration)
    node.last = NodeEvent(event, cause, now, detail)
    if (node.reason, node.reason_time) != had:  # what ``corral why NODE`` shows with it
        node.reason_change = node.last if node.reason else None
    return node.last


def restore(node: NodeRecord, event: str, row: NodeDrain, user: str) -> None:
    """A drain or an operator's DOWN (``event``) read back from the store as a ctld
    starts: applied as it was made, with the cause it was made with."""
    if event not in ("drained", "downed"):
        raise InvalidTransition(f"node {node.name}: {event!r} is not kept in the store")
    transition(
        node,
        event,
        cause=row.cause or "(before ctld kept causes)",
        now=row.reason_time,
        reason=row.reason,
        user=user,
        uid=row.reason_uid,
    )


def _set_reason(
    node: NodeRecord, reason: str, when: float, user: str = "root", uid: int = 0
) -> None:
    node.reason, node.reason_time = reason, when
    node.reason_user, node.reason_uid = user, uid


Effect = Callable[[NodeRecord, float, str, str, int, dict[str, object]], None]


def _registered(
    n: NodeRecord, now: float, _r: str, _u: str, _i: int, reg: dict[str, object]
) -> None:
    if n.instance and reg.get("instance", n.instance) != n.instance:
        n.restarted_at = now  # it killed what its predecessor ran (noded/spool.py)
    for name, value in reg.items():
        setattr(n, name, value)
    n.registered = True
    n.responding = True
    n.late = False
    n.down = n.admin_down  # an operator's DOWN stays until RESUME
    if n.reason == NOT_RESPONDING:
        _set_reason(n, "", 0.0, user="")


def _heartbeat_lost(n: NodeRecord, now: float, reason: str, *_: object) -> None:
    """DOWN; a drain keeps its own reason (the operator's or the fault's)."""
    n.responding = False
    n.down = True
    n.late = False
    if not n.drain:
        _set_reason(n, reason or NOT_RESPONDING, now)


def _downed(n: NodeRecord, now: float, reason: str, user: str, uid: int, _: object) -> None:
    n.responding = False
    n.down = n.admin_down = True
    n.late = False
    _set_reason(n, reason[:256], now, user=user, uid=uid)


def _resumed(n: NodeRecord, *_: object) -> None:
    n.down = n.admin_down = False
    n.registered = False  # it registers again, and is fenced then
    if not n.drain:
        _set_reason(n, "", 0.0, user="")


def _drained(n: NodeRecord, now: float, reason: str, user: str, uid: int, _: object) -> None:
    n.drain = True
    _set_reason(n, reason[:256], now, user=user, uid=uid)


def _undrained(n: NodeRecord, now: float, *_: object) -> None:
    n.drain = False
    _set_reason(n, "", 0.0, user="")
    if n.registered and not n.responding:
        _set_reason(n, NOT_RESPONDING, now)


def _flag(name: str, value: bool) -> Effect:
    def effect(n: NodeRecord, *_: object) -> None:
        setattr(n, name, value)

    return effect


_EFFECTS: dict[str, Effect] = {
    "registered": _registered,
    "late": _flag("late", True),
    "heard": _flag("late", False),
    "heartbeat_lost": _heartbeat_lost,
    "downed": _downed,
    "resumed": _resumed,
    "drained": _drained,
    "undrained": _undrained,
    "fencing": _flag("fencing", True),
    "fenced": _flag("fencing", False),
}
