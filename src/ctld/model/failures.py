"""Node failure rules: when a node is late or DOWN, what happens to its jobs, what it may keep.

The controller's glue (registration, the heartbeat monitor, requeue) calls these small
functions, so the rules live in one place and are tested without daemons:

- liveness: a node is *late* (Slurm's ``*``, NOT_RESPONDING) once a heartbeat is
  overdue by half an interval, and DOWN once it has been silent for
  ``heartbeat.timeout_s`` (SlurmdTimeout's analogue). A node that never registers
  after ctld starts is timed from ctld's start, so it goes DOWN too.
- requeue: a job whose node fails goes back to the queue if it allows it
  (``--requeue``, or ``controller.job_requeue`` unless ``--no-requeue``); otherwise it
  ends NODE_FAIL. Each earlier run is kept for sacct -D (store: job_runs).
- fencing: on re-registration a node is told which jobs it may keep (those ctld still
  places on it); it kills every other before ctld places anything there again.
- suspects: a node whose noded srun lost mid-step holds the job's end until it is
  judged (ctld/ops/suspects.py).
- checkpoint warning: a job's --signal also comes before a maintenance reservation
  starts on its nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from corral.config import HeartbeatConfig
from corral.errors import CorralError
from corral.jobspec import warn_signal
from corral.jobsyntax import WarnSignal
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord
from ctld.sched.model import ReservationView

LATE_FACTOR = 1.5  # a heartbeat this many intervals old is overdue
NOT_RESPONDING = "Not responding"


class Liveness(Enum):
    OK = "ok"
    LATE = "late"
    DEAD = "dead"


def liveness(
    node: NodeRecord, now: float, hb: HeartbeatConfig, since: float, deaf: float = 0.0
) -> Liveness:
    """How the node stands; ``since`` is ctld's start, or when it last heard most nodes
    again (a node is timed from it at the earliest: ctld/fleet/liveness.py); ``deaf``: seconds
    of that silence ctld's own loop was stalled (ctld.fleet.loopwatch)."""
    last = max(node.last_heartbeat, since)
    silent = now - last - max(0.0, deaf)
    if silent > hb.timeout_s:
        return Liveness.DEAD
    if node.registered and silent > hb.interval_s * LATE_FACTOR:
        return Liveness.LATE
    return Liveness.OK


def may_requeue(job: pb.Job, default: bool) -> bool:
    """Slurm's rule: --no-requeue never, --requeue always, else the cluster's JobRequeue."""
    if job.spec.allocation_only or job.spec.no_requeue:
        return False
    return job.spec.requeue or default


def on_node(job: pb.Job, node: str) -> bool:
    """The job holds resources on ``node`` now."""
    return job.state in js.ON_NODE and any(a.node == node for a in job.allocations)


def keep_for(node: str, jobs: Iterable[pb.Job]) -> list[int]:
    """The jobs a (re-)registering node may keep running: those ctld still places there."""
    return sorted(j.job_id for j in jobs if on_node(j, node) and j.state == js.RUNNING)


def suspicion(job: pb.Job, node: str) -> pb.SuspectNode | None:
    """The job's suspicion of ``node`` (srun lost its noded mid-step), if any."""
    return next((s for s in job.suspect_nodes if s.node == node), None)


def no_suspects() -> js.Fields:
    """The fields set when a run is over (ended, requeued): no node of it waits for a
    verdict any more."""
    return {"suspect_nodes": [], "held_end": None}


def stale_report(job: pb.Job, upd: pb.JobStatusUpdate) -> bool:
    """A report about an earlier run of the job (a copy since requeued): to be ignored."""
    return upd.restart_count != job.restart_count


def expedite_priority(pending: Iterable[pb.Job]) -> int:
    """A priority above every pending job's: --requeue=expedite puts the job first."""
    return min(max((j.priority for j in pending), default=0) + 1, 2**32 - 1)


def maintenance_warnings(
    jobs: Iterable[pb.Job], reservations: Iterable[ReservationView], now: float
) -> list[tuple[pb.Job, WarnSignal, str]]:
    """Running jobs to warn with their --signal: a MAINT reservation starts on one of
    their nodes within the signal's lead time, before the job would end on its own."""
    maint = [r for r in reservations if "MAINT" in r.flags and r.start > now]
    out: list[tuple[pb.Job, WarnSignal, str]] = []
    if not maint:
        return out
    for job in jobs:
        if job.state != js.RUNNING:
            continue
        try:
            warn = warn_signal(job.spec)
        except CorralError:
            continue
        if warn is None:
            continue
        ends = job.start_time + job.time_limit_s if job.time_limit_s > 0 else float("inf")
        nodes = {a.node for a in job.allocations}
        for r in maint:
            if r.start <= now + warn.seconds and r.start < ends and nodes & set(r.nodes):
                out.append((job, warn, r.name))
                break
    return out
