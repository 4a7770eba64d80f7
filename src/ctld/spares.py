"""Hot spares (docs/reliability.md): a partition's ``spare_nodes = N`` keeps its last N
idle nodes (in the partition's order) for the jobs requeued after a node failure, so
a failure costs a restart, not a queue wait. The core applies the rule when it places
a job (``Placer``: nodes of ``PartitionView.spare_nodes``, for ``JobRequest.spares_ok``);
this module says which jobs may take them and which nodes are spares now (sinfo)."""

from __future__ import annotations

from corral.wire import corral_pb2 as pb
from ctld.state import State

# the interruptions a spare stands in for: a node lost, not a planned disruption
FAILURES = frozenset({"node_fail", "hang"})


def spares_ok(job: pb.Job) -> bool:
    """A job requeued after its node failed (or hung) may take a spare."""
    return bool(job.interruptions) and job.interruptions[-1].cause in FAILURES


def spare_nodes(state: State) -> set[str]:
    """The nodes that are spares now: each partition's last ``spare_nodes`` idle ones."""
    out: set[str] = set()
    for part in state.config.partitions:
        if not part.spare_nodes:
            continue
        idle = [
            name
            for name in part.nodes
            if (node := state.nodes.get(name)) is not None and node.schedulable and not node.job_ids
        ]
        out.update(idle[-part.spare_nodes :])
    return out
