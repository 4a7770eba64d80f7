"""First fit: every pending job, highest priority first, on the first nodes that fit.

The walking skeleton's policy; the multifactor/backfill core replaces it behind the
same ``schedule(snapshot) -> Plan`` signature.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctld.sched.model import JobRequest, NodeView, Placement, Plan, Snapshot, Start
from ctld.sched.shape import Shape, job_shape


@dataclass
class _Free:
    view: NodeView
    cpus: int
    mem: int
    gpus: list[int]
    idle: bool


def _fits(node: _Free, shape: Shape, req: JobRequest) -> bool:
    if not node.view.schedulable:
        return False
    if req.gpu_type and shape.gpus_per_node and node.view.gpu_type != req.gpu_type:
        return False
    if req.exclusive and not node.idle:
        return False
    return (
        node.cpus >= shape.cpus_per_node
        and node.mem >= shape.mem_per_node_mb
        and len(node.gpus) >= shape.gpus_per_node
    )


def schedule(snapshot: Snapshot) -> Plan:
    free = {
        n.name: _Free(n, n.cpus_free, n.mem_free_mb, list(n.gpus_free), n.idle)
        for n in snapshot.nodes
    }
    partitions = {p.name: p for p in snapshot.partitions}
    starts: list[Start] = []
    reasons: dict[int, str] = {}
    for req in snapshot.pending:
        if req.blocked_reason:
            reasons[req.job_id] = req.blocked_reason
            continue
        shape = job_shape(req)
        reason = "Resources"
        for part_name in req.partitions:
            part = partitions.get(part_name)
            if part is None or part.state != "UP":
                reason = "PartitionDown"
                continue
            if part.max_time_s >= 0 and req.time_limit_s > part.max_time_s:
                reason = "PartitionTimeLimit"
                continue
            if req.time_limit_s < 0 <= part.max_time_s:
                reason = "PartitionTimeLimit"
                continue
            if part.max_nodes and shape.nodes > part.max_nodes:
                reason = "PartitionNodeLimit"
                continue
            candidates = [
                free[name]
                for name in part.nodes
                if name in free
                and (not req.nodelist or name in req.nodelist)
                and name not in req.exclude
            ]
            chosen = [n for n in candidates if _fits(n, shape, req)][: shape.nodes]
            if req.nodelist and not all(
                any(c.view.name == w for c in chosen) for w in req.nodelist
            ):
                # -w names nodes the job must have; first fit may have picked others
                chosen = [free[w] for w in req.nodelist if w in free and _fits(free[w], shape, req)]
                if len(chosen) < len(req.nodelist):
                    chosen = []
            if len(chosen) < shape.nodes:
                reason = "Resources"
                continue
            placements = []
            for node in chosen:
                cpus = node.view.cpus_total if req.exclusive else shape.cpus_per_node
                mem = (
                    node.mem
                    if req.exclusive and not shape.mem_per_node_mb
                    else (shape.mem_per_node_mb)
                )
                gpus = tuple(node.gpus[: shape.gpus_per_node])
                if req.exclusive:
                    gpus = tuple(node.gpus)
                node.cpus -= cpus
                node.mem -= mem
                node.gpus = [g for g in node.gpus if g not in gpus]
                node.idle = False
                placements.append(Placement(node.view.name, cpus, mem, gpus))
            starts.append(Start(req.job_id, part_name, tuple(placements)))
            break
        else:
            reasons[req.job_id] = reason
    return Plan(snapshot_version=snapshot.version, starts=tuple(starts), reasons=reasons)
