"""ctld's pending reasons: decided here, and written here (squeue %r, scontrol's Reason=).

A pending job's reason is decided in two places, one per layer:

- here, ``blocked_reason``: what ctld itself holds a job back for (a hold, a
  dependency, a --begin time or a requeue's delay, its array's %N throttle). The snapshot
  (``snapshot.py``) asks it for every pending job and hands the answer to the core as
  ``JobRequest.blocked_reason``; the commit step asks it too (``settle``);
- in the core (``ctld/sched``): everything else (Resources, Priority, partition
  limits, reservations, QOS and association limits);
- here too, ``write_plan``: a job whose forecast waits for nodes being powered up
  (ctld/powersave/power.py says which) waits for PoweringUp.

Both come back in the plan's ``reasons`` and the applier (``scheduling.py``) writes
them, with the job's forecast, through ``write_plan``. ``settle`` is for the commit
step: a pending job it has just changed (held, released, requeued) shows what that
change means at once, as in Slurm, not only after the next pass.
``tests/unit/test_pending_reasons.py`` holds the two places to this list.
"""

from __future__ import annotations

from collections.abc import Callable

from corral import hostlist
from corral.reasons import HELD, Reason
from corral.wire import corral_pb2 as pb
from ctld.model.deps import DepState
from ctld.sched import INFINITY, Forecast

PENDING_REASONS = frozenset(Reason)

# the verdict on the jobs a job's --dependency names (``deps.evaluate``)
DependencyCheck = Callable[[pb.Job], DepState]


def blocked_reason(
    job: pb.Job,
    now: float,
    dependency: DependencyCheck | None = None,
    throttled: Callable[[pb.Job], bool] | None = None,
) -> str:
    """Why ctld holds pending ``job`` back ("" if it does not), in Slurm 22.05's order: a
    hold, a dependency (``dependency``: the snapshot's verdict on the jobs it names),
    a --begin time (or a requeue's delay) still ahead, its array's %N throttle
    (``throttled``: whether the array runs as many tasks as it may). (Slurm tests the
    dependency before the begin time: a job with both waits for Dependency.) Without
    the two checks, only what the job itself says (the commit step's case)."""
    if job.hold:
        return Reason.JOB_HELD_ADMIN if job.hold == pb.HOLD_ADMIN else Reason.JOB_HELD_USER
    if dependency is not None and job.spec.dependency:
        verdict = dependency(job)
        if verdict is DepState.WAITING:
            return Reason.DEPENDENCY
        if verdict is DepState.NEVER:
            return Reason.DEPENDENCY_NEVER_SATISFIED
    if job.eligible_time > now:
        return Reason.BEGIN_TIME
    if throttled is not None and job.array_job_id and throttled(job):
        return Reason.JOB_ARRAY_TASK_LIMIT
    return ""


def write(job: pb.Job, reason: str) -> bool:
    """Set ``job``'s reason; True if it changed."""
    if job.reason == reason:
        return False
    job.reason = reason
    return True


def settle(job: pb.Job, now: float | None = None) -> bool:
    """The reason a pending job has right after a change to it (until the next pass):
    a hold at once; a released job's hold reason goes (the next pass says what it waits
    for); a job back in the queue from a node (its reason is one no pending job has)
    waits, with ``now``, for its eligible time (a requeue's delay: BeginTime), else for
    Resources until a pass says more. What it waits for is ``blocked_reason``'s rule,
    read from the job alone."""
    if job.hold:
        return write(job, blocked_reason(job, INFINITY))
    if job.reason in HELD:
        return write(job, "")
    # (a reason may carry detail after a comma: "ReqNodeNotAvail, UnavailableNodes:n1")
    if (
        job.reason
        and job.reason not in PENDING_REASONS  # Slurm's "Nodes required ... DOWN, ..."
        and job.reason.split(",", 1)[0] not in PENDING_REASONS
    ):
        return write(job, blocked_reason(job, INFINITY if now is None else now) or Reason.RESOURCES)
    return False


def write_plan(
    job: pb.Job, reason: str, forecast: Forecast | None, *, powering_up: bool = False
) -> bool:
    """Write the plan's reason and forecast (when it starts, where, what it waits for)
    for pending ``job``; True if anything changed. ``powering_up``: its forecast waits
    for nodes being powered up (ctld/powersave/power.py), and its reason says so."""
    if powering_up:
        reason = Reason.POWERING_UP
    head, sep, names = reason.partition("UnavailableNodes:")
    if sep:  # as Slurm prints it: ReqNodeNotAvail, UnavailableNodes:node[01-02]
        reason = head + sep + hostlist.compress(names.split(","))
    changed = write(job, reason)
    if forecast is None:
        # (written only when set: most pending jobs have no forecast, pass after pass)
        if job.expected_start or job.forecast_nodes or job.forecast_reserved or job.waits_for:
            changed |= job.expected_start != 0 or bool(job.forecast_nodes)
            clear_forecast(job)
    elif (
        job.expected_start != forecast.start
        or list(job.waits_for) != list(forecast.waits_for)
        or job.forecast_reserved != forecast.reserved
    ):
        changed = True
        job.expected_start = forecast.start if forecast.start != INFINITY else 0
        job.forecast_nodes = hostlist.compress(list(forecast.nodes))
        job.forecast_reserved = forecast.reserved
        job.waits_for[:] = forecast.waits_for
    return changed


def clear_forecast(job: pb.Job) -> None:
    job.expected_start, job.forecast_nodes = 0, ""
    job.forecast_reserved = False
    del job.waits_for[:]
