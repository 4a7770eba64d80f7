"""Hot spares (docs/reliability.md): a partition's ``spare_nodes = N`` keeps its last N
idle nodes (in the partition's order) for the jobs requeued after a node failure, so
a failure costs a restart, not a queue wait. The core applies the rule when it places
a job (``Placer``: nodes of ``PartitionView.spare_nodes``, for ``JobRequest.spares_ok``);
such a job also claims back the nodes its run kept healthy for a heartbeat timeout
(``JobRequest.reclaim``, the core's sched/reclaim.py). This module says which jobs may
take spares, what they claim, and which nodes are spares now (sinfo)."""

from __future__ import annotations

from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model import jobstate as js

# the interruptions a spare stands in for: a node lost, not a planned disruption
FAILURES = frozenset({"node_fail", "hang"})


def spares_ok(job: pb.Job) -> bool:
    """A job requeued after its node failed (or hung) may take a spare."""
    return bool(job.interruptions) and job.interruptions[-1].cause in FAILURES


def reclaim(job: pb.Job, timeout_s: float) -> tuple[tuple[str, ...], float]:
    """What a job requeued after a node failure claims back: the nodes its run kept
    healthy, until a heartbeat timeout after the requeue (a healthy node only late
    then is heard again, or declared DOWN, by that time); ((), 0) for any other job."""
    if not spares_ok(job) or not job.previous_nodes:
        return (), 0.0
    return tuple(job.previous_nodes), job.interruptions[-1].time + timeout_s


def claimed_nodes(state: State) -> set[str]:
    """The nodes pending jobs claim back now (the core holds them for those jobs)."""
    now, timeout = state.clock(), state.config.heartbeat.timeout_s
    out: set[str] = set()
    for job_id in state.index.pending:
        job = state.jobs.get(job_id)
        # (most pending jobs never ran: one field read each)
        if job is None or not job.restart_count or job.state != js.PENDING or job.hold:
            continue
        nodes, until = reclaim(job, timeout)
        if now < until:
            out.update(nodes)
    return out


def spare_nodes(state: State) -> set[str]:
    """The nodes that are spares now: each partition's last ``spare_nodes`` idle ones
    that no requeued job claims back."""
    out: set[str] = set()
    claimed: set[str] | None = None
    for part in state.config.partitions:
        if not part.spare_nodes:
            continue
        if claimed is None:
            claimed = claimed_nodes(state)
        idle = [
            name
            for name in part.nodes
            if (node := state.nodes.get(name)) is not None
            and node.schedulable
            and not node.job_ids
            and name not in claimed
        ]
        out.update(idle[-part.spare_nodes :])
    return out
