"""Fragmentation-aware placement (the idea of FGD, Weng et al., ATC'23).

A node's fragmentation, for a workload of expected per-node demands, is the number of
its free GPUs a demand could not use because the node cannot hold that demand (too few
free GPUs, CPUs or memory left), averaged over the demands by their weights. A job goes
to the node where it raises that number least: small jobs land where their leftovers
are already unusable for big ones, and nodes that can still take a whole-node job stay
whole. With whole GPUs (corral does not share a GPU between jobs) a demand that fits
leaves no fragment.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctld.sched.model import Demand, Snapshot
from ctld.sched.profile import Avail
from ctld.sched.shape import Shape, job_shape

# with no pending jobs to learn from: GPU jobs of 1, 2, 4 and 8 GPUs, equally likely
DEFAULT_DEMANDS = (Demand(1), Demand(2), Demand(4), Demand(8))


class Fragmentation:
    def __init__(self, demands: Sequence[Demand]) -> None:
        gpu = [d for d in demands if d.gpus > 0 and d.weight > 0] or list(DEFAULT_DEMANDS)
        total = sum(d.weight for d in gpu)
        self.demands = [(d.gpus, d.cpus, d.mem_mb, d.weight / total) for d in gpu]
        self.cache: dict[tuple[int, int, int], float] = {}

    def of(self, gpus: int, cpus: int, mem: int) -> float:
        """Expected unusable free GPUs of a node with this much left."""
        key = (gpus, cpus, mem)
        got = self.cache.get(key)
        if got is None:
            got = 0.0
            if gpus:
                for g, c, m, w in self.demands:
                    if g > gpus or c > cpus or m > mem:
                        got += w * gpus
            self.cache[key] = got
        return got

    def delta(self, avail: Avail, shape: Shape) -> float:
        """How much placing ``shape`` on a node with ``avail`` raises its fragmentation."""
        gpus = len(avail.gpus)
        before = self.of(gpus, avail.cpus, avail.mem)
        after = self.of(
            gpus - shape.gpus_per_node,
            avail.cpus - shape.cpus_per_node,
            avail.mem - shape.mem_per_node_mb,
        )
        return after - before


def pending_demands(snap: Snapshot) -> tuple[Demand, ...]:
    """The queue's own per-node shapes, when ctld gives no expected demand."""
    if snap.settings.placement != "frag":
        return ()
    counts: dict[tuple[int, int, int], int] = {}
    for req in snap.pending:
        shape = job_shape(req)
        key = (shape.gpus_per_node, shape.cpus_per_node, shape.mem_per_node_mb)
        counts[key] = counts.get(key, 0) + 1
    return tuple(Demand(g, c, m, float(n)) for (g, c, m), n in counts.items())
