"""How many nodes a job needs and what it needs on each: Slurm's task arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

from ctld.sched.model import JobRequest


@dataclass(frozen=True)
class Shape:
    nodes: int
    tasks_per_node: int
    cpus_per_node: int
    mem_per_node_mb: int
    gpus_per_node: int
    shards_per_node: int = 0  # shards of one GPU, besides any whole GPUs


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def job_shape(req: JobRequest) -> Shape:
    """Per-node needs of ``req``, from -N/-n/--ntasks-per-node/-c/--mem/--gpus."""
    ntasks = max(req.ntasks, 1)
    if req.nodes_min:
        nodes = req.nodes_min
    elif req.ntasks_per_node:
        nodes = _ceil_div(ntasks, req.ntasks_per_node)
    else:
        nodes = 1
    tasks_per_node = req.ntasks_per_node or _ceil_div(ntasks, nodes)
    cpus = tasks_per_node * max(req.cpus_per_task, 1)
    mem = req.mem_per_node_mb or req.mem_per_cpu_mb * cpus
    gpus = req.gpus_per_node or (_ceil_div(req.gpus_total, nodes) if req.gpus_total else 0)
    if req.gpus_per_task:
        gpus = max(gpus, req.gpus_per_task * tasks_per_node)
    return Shape(
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        cpus_per_node=cpus,
        mem_per_node_mb=mem,
        gpus_per_node=gpus,
        shards_per_node=req.shards_per_node,
    )


def fits_empty(shape: Shape, cpus: int, mem_mb: int, gpus: int) -> bool:
    """Whether one node of this size could ever hold the per-node part of ``shape``."""
    return (
        shape.cpus_per_node <= cpus
        and shape.mem_per_node_mb <= mem_mb
        and (shape.gpus_per_node + (1 if shape.shards_per_node else 0) <= gpus)
    )
