"""The job state machine: the only place a job's state changes.

Every change is a named event with a cause (the RPC, scheduler pass or node report
that made it) appended to the job's story, which ``scontrol show job`` and
``corral why`` read. An event applied from a state it does not allow raises
InvalidTransition: that is a bug in ctld, never a user error.

    (new) --submitted--> PENDING --started--> RUNNING --exited--> COMPLETED | FAILED |
                          |  ^                 |  |               CANCELLED | TIMEOUT |
                          |  +----requeued-----+  |               OUT_OF_MEMORY | NODE_FAIL
                          |                    +--launch_failed--> FAILED
                          |                       +--cancel_requested--> COMPLETING --exited--^
                          +--cancelled--> CANCELLED
                          +--partition_removed--> NODE_FAIL (a reconfigure took its every partition)
    held / released / signalled / recovered / updated keep the state and only add to the story.
"""

from __future__ import annotations

from typing import Any

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb

S = pb.JobState
PENDING = S.JOB_STATE_PENDING
RUNNING = S.JOB_STATE_RUNNING
COMPLETING = S.JOB_STATE_COMPLETING
COMPLETED = S.JOB_STATE_COMPLETED
FAILED = S.JOB_STATE_FAILED
CANCELLED = S.JOB_STATE_CANCELLED
TIMEOUT = S.JOB_STATE_TIMEOUT
NODE_FAIL = S.JOB_STATE_NODE_FAIL
OUT_OF_MEMORY = S.JOB_STATE_OUT_OF_MEMORY
PREEMPTED = S.JOB_STATE_PREEMPTED
NEW = S.JOB_STATE_UNSPECIFIED

ACTIVE = frozenset({PENDING, RUNNING, COMPLETING})
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED})
ON_NODE = frozenset({RUNNING, COMPLETING})

# fields an event sets with it, by name (the commit step sets them: ctld/core/commit.py)
Fields = dict[str, Any]

_SAME = frozenset[int]()  # marker: the event keeps the state

# event -> (states it may start from, states it may lead to; empty = unchanged)
EVENTS: dict[str, tuple[frozenset[int], frozenset[int]]] = {
    "submitted": (frozenset({NEW}), frozenset({PENDING})),
    "held": (frozenset({PENDING}), _SAME),
    "released": (frozenset({PENDING}), _SAME),
    "started": (frozenset({PENDING}), frozenset({RUNNING})),
    "cancelled": (frozenset({PENDING}), frozenset({CANCELLED})),
    # Slurm's reconfigure ends a pending job whose partition is gone NODE_FAIL
    "partition_removed": (frozenset({PENDING}), frozenset({NODE_FAIL})),
    "cancel_requested": (frozenset({RUNNING}), frozenset({COMPLETING})),
    "signalled": (ON_NODE, _SAME),
    "exited": (ON_NODE, FINISHED),
    "launch_failed": (frozenset({RUNNING}), frozenset({FAILED})),
    "requeued": (frozenset({RUNNING}), frozenset({PENDING})),
    "recovered": (ACTIVE, _SAME),
    "updated": (ACTIVE, _SAME),
}


def state_name(state: int) -> str:
    return pb.JobState.Name(state).removeprefix("JOB_STATE_")  # type: ignore[arg-type]


def check(job: pb.Job, event: str, cause: str = "") -> None:
    """Raise InvalidTransition if ``event`` cannot apply to ``job`` now (changes nothing)."""
    allowed_from, _ = EVENTS[event]
    if int(job.state) not in allowed_from:
        raise InvalidTransition(
            f"job {job.job_id}: event {event!r} is impossible in state "
            f"{state_name(int(job.state))} (cause {cause})"
        )


def target(job: pb.Job, event: str, *, cause: str, to: int | None = None) -> int:
    """The state ``event`` leads ``job`` to (``to`` where it may lead to several); raises
    InvalidTransition if it cannot apply now. Changes nothing."""
    if event not in EVENTS:
        raise InvalidTransition(f"job {job.job_id}: unknown event {event!r} (cause {cause})")
    allowed_from, allowed_to = EVENTS[event]
    before = int(job.state)
    if before not in allowed_from:
        raise InvalidTransition(
            f"job {job.job_id}: event {event!r} is impossible in state {state_name(before)} "
            f"(cause {cause})"
        )
    if allowed_to is _SAME:
        if to is not None and to != before:
            raise InvalidTransition(f"job {job.job_id}: event {event!r} keeps the state")
        return before
    if to is None:
        if len(allowed_to) != 1:
            raise InvalidTransition(f"job {job.job_id}: event {event!r} needs a target state")
        (after,) = allowed_to
    else:
        after = to
    if after not in allowed_to:
        raise InvalidTransition(
            f"job {job.job_id}: event {event!r} cannot lead from {state_name(before)} "
            f"to {state_name(after)} (cause {cause})"
        )
    return after


def transition(
    job: pb.Job,
    event: str,
    *,
    cause: str,
    now: float,
    to: int | None = None,
    detail: str = "",
) -> pb.JobEvent:
    """Apply ``event`` to ``job`` (moving it to ``to`` where the event changes state)."""
    before = int(job.state)
    after = target(job, event, cause=cause, to=to)
    job.state = after  # type: ignore[assignment]  # an int from the enum's own values
    record = job.events.add(
        time=now, event=event, from_state=before, to_state=after, cause=cause, detail=detail
    )
    return record
