"""The replay's nodes: what each holds, and the core's view of it (as ctld's NodeViews
makes it, remade only for a node whose allocations changed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctld.sched import NodeView, Placement
from ctld.sim.site import NodeSize


@dataclass
class SimNode:
    size: NodeSize
    cpus_free: int = 0
    mem_free: int = 0
    gpus_free: set[int] = field(default_factory=set)
    shards: dict[int, int] = field(default_factory=dict)  # GPU index -> shards taken
    jobs: set[int] = field(default_factory=set)
    _view: NodeView | None = None

    def __post_init__(self) -> None:
        self.cpus_free, self.mem_free = self.size.cpus, self.size.memory_mb
        self.gpus_free = set(range(self.size.gpus))

    def view(self) -> NodeView:
        if self._view is None:
            s = self.size
            self._view = NodeView(
                name=s.name,
                cpus_total=s.cpus,
                mem_total_mb=s.memory_mb,
                gpus_total=s.gpus,
                cpus_free=max(self.cpus_free, 0),
                mem_free_mb=max(self.mem_free, 0),
                gpus_free=tuple(sorted(self.gpus_free)),
                gpu_type=s.gpu_type,
                idle=not self.jobs,
                shards_per_gpu=s.shards_per_gpu,
                shards_used=tuple(sorted(self.shards.items())),
            )
        return self._view

    def fits(self, p: Placement) -> bool:
        if p.cpus > self.cpus_free or p.mem_mb > self.mem_free:
            return False
        if p.shards:
            taken = self.shards.get(p.gpu_indices[0], 0)
            whole_free = p.gpu_indices[0] in self.gpus_free
            return (whole_free or taken > 0) and taken + p.shards <= self.size.shards_per_gpu
        return all(g in self.gpus_free for g in p.gpu_indices)

    def take(self, job_id: int, p: Placement) -> None:
        self.cpus_free -= p.cpus
        self.mem_free -= p.mem_mb
        if p.shards:
            gpu = p.gpu_indices[0]
            self.gpus_free.discard(gpu)
            self.shards[gpu] = self.shards.get(gpu, 0) + p.shards
        else:
            self.gpus_free.difference_update(p.gpu_indices)
        self.jobs.add(job_id)
        self._view = None

    def give_back(self, job_id: int, p: Placement) -> None:
        self.cpus_free += p.cpus
        self.mem_free += p.mem_mb
        if p.shards:
            gpu = p.gpu_indices[0]
            left = self.shards.get(gpu, 0) - p.shards
            if left > 0:
                self.shards[gpu] = left
            else:
                self.shards.pop(gpu, None)
                self.gpus_free.add(gpu)  # the last shard job gone: whole again
        else:
            self.gpus_free.update(p.gpu_indices)
        self.jobs.discard(job_id)
        self._view = None


class Nodes:
    """Every node of the replay, in the config's order (the core's node order)."""

    def __init__(self, sizes: tuple[NodeSize, ...]) -> None:
        self.by_name = {s.name: SimNode(s) for s in sizes}
        self.order = [self.by_name[s.name] for s in sizes]
        self._views: tuple[NodeView, ...] | None = None

    def views(self) -> tuple[NodeView, ...]:
        if self._views is None:
            self._views = tuple(n.view() for n in self.order)
        return self._views

    def fits(self, placements: tuple[Placement, ...]) -> bool:
        return bool(placements) and all(
            p.node in self.by_name and self.by_name[p.node].fits(p) for p in placements
        )

    def take(self, job_id: int, placements: tuple[Placement, ...]) -> None:
        for p in placements:
            self.by_name[p.node].take(job_id, p)
        self._views = None

    def give_back(self, job_id: int, placements: tuple[Placement, ...]) -> None:
        for p in placements:
            node = self.by_name.get(p.node)
            if node is not None:
                node.give_back(job_id, p)
        self._views = None

    def gpus(self, names: tuple[str, ...]) -> int:
        return sum(self.by_name[n].size.gpus for n in names if n in self.by_name)
