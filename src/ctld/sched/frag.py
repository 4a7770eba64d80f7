"""Fragmentation-aware placement (the idea of FGD, Weng et al., ATC'23).

A node's fragmentation, for one expected demand, is the free GPU capacity that demand
could not use there: all of it when the demand does not fit on the node at all (too
few CPUs, too little memory, too few free GPUs or shards), else the partly used
(shared) GPUs that cannot serve it: for a whole-GPU demand every shared GPU's free
shards, for a shard demand the shared GPUs with fewer shards left than it asks.
Averaged over the expected demands by their weights, that is the node's expected
fragmentation (in GPUs). A job goes to the node, and a shard job to the GPU, where
placing it raises that number least: small jobs land where their leftovers are
already unusable for the bigger ones, and whole GPUs and whole nodes stay whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctld.sched.model import Demand, Snapshot
from ctld.sched.shape import Shape, job_shape

# with no pending jobs to learn from: GPU jobs of 1, 2, 4 and 8 GPUs, equally likely
DEFAULT_DEMANDS = (Demand(1), Demand(2), Demand(4), Demand(8))

# a node's state as fragmentation sees it: free CPUs, free memory, free whole GPUs, the
# shards left on its shared GPUs (sorted, none zero) and its shards per GPU
State = tuple[int, int, int, tuple[int, ...], int]


class Fragmentation:
    def __init__(self, demands: Sequence[Demand]) -> None:
        gpu = [d for d in demands if (d.gpus > 0 or d.shards > 0) and d.weight > 0]
        gpu = gpu or list(DEFAULT_DEMANDS)
        total = sum(d.weight for d in gpu)
        # demands by their GPU ask (whole GPUs, shards): what a node's GPUs decide; the
        # CPUs and memory only decide whether a demand fits there at all
        by_ask: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
        for d in gpu:
            by_ask.setdefault((d.gpus, d.shards), []).append((d.cpus, d.mem_mb, d.weight / total))
        self.asks = list(by_ask)
        self.by_ask = [by_ask[a] for a in self.asks]
        self.cache: dict[State, float] = {}
        self.fit_cache: dict[tuple[int, int], list[float]] = {}

    def _fitting(self, cpus: int, mem: int) -> list[float]:
        """Per GPU ask, the weight of the demands whose CPUs and memory fit."""
        got = self.fit_cache.get((cpus, mem))
        if got is None:
            got = [sum(w for c, m, w in ds if c <= cpus and m <= mem) for ds in self.by_ask]
            if len(self.fit_cache) > 100_000:
                self.fit_cache.clear()
            self.fit_cache[(cpus, mem)] = got
        return got

    def of(self, state: State) -> float:
        """Expected GPU capacity (in GPUs) of a node in ``state`` that the demands
        could not use."""
        got = self.cache.get(state)
        if got is not None:
            return got
        cpus, mem, whole, shared, per_gpu = state
        shared_free = sum(shared) / per_gpu if per_gpu else 0.0
        free = whole + shared_free
        got = 0.0
        if free:
            top = shared[-1] if shared else 0
            # a demand that does not fit leaves all of it unusable; one that fits, the
            # shared GPUs it cannot use
            usable = 0.0
            for (g, k), w in zip(self.asks, self._fitting(cpus, mem), strict=True):
                if not w:
                    continue
                if k:
                    if k <= per_gpu and (whole > g or (whole == g and top >= k)):
                        usable += w * (free - sum(s for s in shared if s < k) / per_gpu)
                elif whole >= g:
                    usable += w * whole
            got = free - usable
        if len(self.cache) > 200_000:
            self.cache.clear()
        self.cache[state] = got
        return got

    def delta(self, before: State, shape: Shape, gpu_left: int = -1, fresh: bool = False) -> float:
        """How much placing ``shape`` raises a node's fragmentation: its whole GPUs, and
        for a shard job the shared GPU it joins (``gpu_left``: the shards that GPU has
        now; ``fresh``: it takes a free GPU to share instead)."""
        cpus, mem, whole, shared, per_gpu = before
        whole -= shape.gpus_per_node
        if shape.shards_per_node:
            left = list(shared)
            if fresh:
                whole -= 1
                gpu_left = per_gpu
            else:
                left.remove(gpu_left)
            if gpu_left - shape.shards_per_node:
                left.append(gpu_left - shape.shards_per_node)
            shared = tuple(sorted(left))
        after = (cpus - shape.cpus_per_node, mem - shape.mem_per_node_mb, whole, shared, per_gpu)
        return self.of(after) - self.of(before)


def pending_demands(snap: Snapshot) -> tuple[Demand, ...]:
    """The queue's own per-node shapes, when ctld gives no expected demand."""
    if snap.settings.placement not in ("frag", "fgd"):
        return ()
    counts: dict[tuple[int, int, int, int], int] = {}
    for req in snap.pending:
        shape = job_shape(req)
        key = (
            shape.gpus_per_node,
            shape.cpus_per_node,
            shape.mem_per_node_mb,
            shape.shards_per_node,
        )
        counts[key] = counts.get(key, 0) + 1
    return tuple(Demand(g, c, m, float(n), k) for (g, c, m, k), n in counts.items())
