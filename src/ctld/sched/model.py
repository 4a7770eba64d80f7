"""Plain, immutable types the scheduling core reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeView:
    name: str
    cpus_total: int
    mem_total_mb: int
    gpus_total: int
    cpus_free: int
    mem_free_mb: int
    gpus_free: tuple[int, ...]  # free GPU indices, ascending
    gpu_type: str = ""
    schedulable: bool = True  # up and not drained
    idle: bool = True  # nothing allocated (for --exclusive)


@dataclass(frozen=True)
class PartitionView:
    name: str
    nodes: tuple[str, ...]
    state: str = "UP"
    max_nodes: int = 0
    max_time_s: int = -1


@dataclass(frozen=True)
class JobRequest:
    """One pending job as the scheduler sees it (already defaulted by ctld)."""

    job_id: int
    partitions: tuple[str, ...]  # candidates, in the user's order
    nodes_min: int = 1
    nodes_max: int = 0  # 0: same as nodes_min
    ntasks: int = 1
    ntasks_per_node: int = 0
    cpus_per_task: int = 1
    mem_per_node_mb: int = 0
    mem_per_cpu_mb: int = 0
    gpus_per_node: int = 0
    gpus_total: int = 0
    gpu_type: str = ""
    exclusive: bool = False
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    time_limit_s: int = -1
    priority: int = 0
    blocked_reason: str = ""  # e.g. JobHeldUser: not a candidate this pass


@dataclass(frozen=True)
class Snapshot:
    version: int
    now: float
    nodes: tuple[NodeView, ...]
    partitions: tuple[PartitionView, ...]
    pending: tuple[JobRequest, ...]  # highest priority first


@dataclass(frozen=True)
class Placement:
    node: str
    cpus: int
    mem_mb: int
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class Start:
    job_id: int
    partition: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Plan:
    snapshot_version: int
    starts: tuple[Start, ...] = ()
    reasons: dict[int, str] = field(default_factory=dict)  # pending job -> Slurm reason
