"""The one writer of a pending job's reason (squeue %r, scontrol's Reason=).

Where a reason is decided: ctld's own blockers (a hold, a --begin time, a dependency,
an array's %N throttle) in ``snapshot.py``, which hands them to the core as
``JobRequest.blocked_reason``; everything else (Resources, Priority, partition
limits, reservations, QOS limits) in the core (``ctld/sched``). Both come back in the
plan's ``reasons`` and the applier (``scheduling.py``) writes them here.

``settle`` is for the commit step: a pending job it has just changed (held, released,
requeued, a requeue's delay) shows what that change means at once, as in Slurm, not
only after the next pass; it reads only the job itself (and the time).
"""

from __future__ import annotations

from corral.reasons import HELD, Reason
from corral.wire import corral_pb2 as pb

PENDING_REASONS = frozenset(Reason)


def write(job: pb.Job, reason: str) -> bool:
    """Set ``job``'s reason; True if it changed."""
    if job.reason == reason:
        return False
    job.reason = reason
    return True


def settle(job: pb.Job, now: float | None = None) -> bool:
    """The reason a pending job has right after a change to it (until the next pass);
    with ``now``, a job back from a node that may not start before its eligible time
    (controller.requeue_delay_s) waits for BeginTime."""
    if job.hold:
        return write(
            job, Reason.JOB_HELD_ADMIN if job.hold == pb.HOLD_ADMIN else Reason.JOB_HELD_USER
        )
    if job.reason in HELD:
        return write(job, "")  # released: the next pass says what it waits for
    # (a reason may carry detail after a comma: "ReqNodeNotAvail, UnavailableNodes:n1")
    if (
        job.reason
        and job.reason not in PENDING_REASONS  # Slurm's "Nodes required ... DOWN, ..."
        and job.reason.split(",", 1)[0] not in PENDING_REASONS
    ):
        # back in the queue from a node (requeued)
        late = now is not None and job.eligible_time > now
        return write(job, Reason.BEGIN_TIME if late else Reason.RESOURCES)
    return False
