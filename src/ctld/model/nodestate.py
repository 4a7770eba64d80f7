"""The node state machine: the only place a node's state (its flags and reason) changes.

Beside ``jobstate`` (the job's), and applied like it only by the commit step
(``ctld/core/commit.py``): every change is a named event with a cause (the RPC, report or
monitor that made it), kept as the node's last change, in its recent history (the
last ``nodes.HISTORY``, in memory: ``corral history NODE``), and as the change that
set its reason (a drain's or a DOWN's cause is stored with its row, and comes back
first in the history after a restart): ``corral why NODE`` shows them. An event
applied where it cannot apply raises InvalidTransition: that is a bug in ctld, never
a user error (callers that take a request, e.g. scontrol's RESUME of a node that is
up, check first).

    UNKNOWN --registered--> up (IDLE, MIXED, ALLOCATED: by its jobs)
    up --late--> up* (NOT_RESPONDING) --heard--> up
    up, up* --heartbeat_lost--> DOWN* --registered--> up
    any --downed--> DOWN (an operator's: it outlives a restart, and a registration)
    DOWN --resumed--> UNKNOWN (it registers again, and is fenced then)
    any --drained--> +DRAIN --undrained--> -DRAIN   (beside the above: DRAINING, DRAINED)
    registered --fencing--> +fencing (back with jobs it may not keep) --fenced--> -fencing

Power saving (ctld/powersave/power.py decides when; the base state above stays, the power state
is beside it as Slurm's flags are: ``idle~``, ``idle#``, ``idle%``, ``mix!``):

    ON (idle) --powering_down--> POWERING_DOWN --powered_down--> POWERED_DOWN
    POWERED_DOWN --powering_up--> POWERING_UP --registered--> ON
    POWERING_UP --resume_failed--> POWERED_DOWN + DOWN (reason: why)
    POWERING_DOWN --suspend_failed--> ON + DOWN (reason: why; back when it registers)
    POWERED_DOWN --registered--> ON (it booted by itself: taken as it is)
    ON --power_down_asked--> +pending ("!"; nothing new placed) --powering_down--> ...
    ON --power_down_cancelled--> -pending
    (ctld's start) --cloud--> POWERED_DOWN (state = "cloud" in the config)
"""

from __future__ import annotations

from collections.abc import Callable

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb
from ctld.model.nodes import (
    POWER_ON,
    POWERED_DOWN,
    POWERING_DOWN,
    POWERING_UP,
    NodeEvent,
    NodeRecord,
)
from ctld.storage.store_rows import NodeDrain, NodePower

NOT_RESPONDING = "Not responding"
IDLE_ON_SUSPEND = "idle_on_node_suspend"  # powered_down's reason: clear DRAIN and DOWN

# what a registration brings (the rest of a registration is the machine's own)
REGISTRATION = frozenset(
    {"address", "agent_address", "stream_address", "instance", "took_over", "resources"}
    | {"boot_time", "version", "os"}
)
# the fields this machine owns: nothing else writes them (tests/unit/test_commit_path.py)
FIELDS = REGISTRATION | frozenset(
    {"registered", "responding", "down", "late", "admin_down", "fencing", "drain"}
    | {"reason", "reason_time", "reason_user", "reason_uid", "restarted_at", "last"}
    | {"reason_change", "history"}
    | {"power", "power_since", "power_down_pending", "powered_down_s", "dynamic"}
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
    "powering_down": lambda n: n.power == POWER_ON and not n.job_ids,
    "powered_down": lambda n: n.power == POWERING_DOWN,
    "powering_up": lambda n: n.power == POWERED_DOWN and not n.down,
    "resume_failed": lambda n: n.power == POWERING_UP,
    "suspend_failed": lambda n: n.power in (POWERING_DOWN, POWERED_DOWN),
    "power_down_asked": lambda n: n.power == POWER_ON,
    "cloud": lambda n: n.power == POWER_ON and not n.registered,
    "power_down_cancelled": lambda n: n.power_down_pending,
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
    _record(node, NodeEvent(event, cause, now, detail))
    if (node.reason, node.reason_time) != had:  # what ``corral why NODE`` shows with it
        node.reason_change = node.last if node.reason else None
    assert node.last is not None
    return node.last


# the event that leaves a node in each power state (what a restored one last did)
_POWER_EVENTS: dict[int, str] = {
    POWERED_DOWN: "powered_down",
    POWERING_UP: "powering_up",
    POWERING_DOWN: "powering_down",
}


def restore_power(node: NodeRecord, row: NodePower) -> None:
    """A power state read back from the store as a ctld starts. Powered down stays so
    (never judged silent: the heartbeat monitor leaves nodes not on to power saving);
    powering up or down keeps its start, so resume_timeout and suspend_timeout run on
    from when they began; the energy counted so far is kept."""
    if row.power not in (POWER_ON, POWERED_DOWN, POWERING_UP, POWERING_DOWN):
        raise InvalidTransition(f"node {node.name}: no power state {row.power} to restore")
    node.power, node.power_since = row.power, row.since
    node.power_down_pending = row.pending
    node.powered_down_s = row.powered_down_s
    event = _POWER_EVENTS[row.power] if row.power != POWER_ON else "power_down_asked"
    _record(node, NodeEvent(event, row.cause, row.since, "kept across a ctld restart"))


def _record(node: NodeRecord, change: NodeEvent) -> None:
    """``change`` is the node's last, and the newest of its kept history."""
    node.last = change
    node.history.append(change)


def restore(node: NodeRecord, event: str, row: NodeDrain, user: str) -> None:
    """A drain or an operator's DOWN (``event``) read back from the store as a ctld
    starts: applied as it was made, with the cause it was made with; or a cloud node's
    start, powered down (``cloud``: its row made from the config)."""
    if event not in ("drained", "downed", "cloud"):
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
    if n.instance and reg.get("instance", n.instance) != n.instance and not reg.get("took_over"):
        n.restarted_at = now  # it killed what its predecessor ran (noded/recovery.py)
    for name, value in reg.items():
        setattr(n, name, value)
    if n.power != POWER_ON:
        _set_power(n, POWER_ON, now)
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


def _set_power(n: NodeRecord, power: int, now: float) -> None:
    if n.power == POWERED_DOWN:  # what it saved: counted in `corral report` and metrics
        n.powered_down_s += max(0.0, now - n.power_since)
    n.power, n.power_since = power, now


def _powering_down(n: NodeRecord, now: float, *_: object) -> None:
    _set_power(n, POWERING_DOWN, now)
    n.power_down_pending = False
    n.registered = n.responding = n.late = n.fencing = False  # its noded is being stopped


def _powered_down(n: NodeRecord, now: float, reason: str, *_: object) -> None:
    _set_power(n, POWERED_DOWN, now)
    if reason == IDLE_ON_SUSPEND:  # SlurmctldParameters=idle_on_node_suspend
        n.drain = n.down = n.admin_down = False
        _set_reason(n, "", 0.0, user="")


def _powering_up(n: NodeRecord, now: float, *_: object) -> None:
    _set_power(n, POWERING_UP, now)


def _powering_up_later(n: NodeRecord, now: float, *_: object) -> None:
    _set_power(n, POWERED_DOWN, now)


def _resume_failed(n: NodeRecord, now: float, reason: str, *_: object) -> None:
    """DOWN with why (``sinfo -R``), and off: RESUME or a registration brings it back."""
    _set_power(n, POWERED_DOWN, now)
    n.down, n.responding = True, False
    _set_reason(n, reason[:256] or "ResumeTimeout reached", now)


def _suspend_failed(n: NodeRecord, now: float, reason: str, *_: object) -> None:
    """DOWN with why, and taken as on: if its noded still runs it registers again."""
    _set_power(n, POWER_ON, now)
    n.down, n.responding, n.registered = True, False, False
    _set_reason(n, reason[:256], now)


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
    "powering_down": _powering_down,
    "powered_down": _powered_down,
    "powering_up": _powering_up,
    "resume_failed": _resume_failed,
    "suspend_failed": _suspend_failed,
    "power_down_asked": _flag("power_down_pending", True),
    "cloud": _powering_up_later,
    "power_down_cancelled": _flag("power_down_pending", False),
}
