"""The snapshot's nodes by name and by free GPU count, kept from one pass to the next.

A pass looks nodes up by name (a job's partition, its -w nodes, a running job's
placements) and, placing by best fit, walks them by free GPU count. Both are derived
from the node views alone, so they are kept between passes and changed only where a
view changed: ctld's snapshot builder keeps a node's view object until the node
changes (its allocations, registration or schedulability), so a view that is the same
object is the same node. At 12,500 nodes, a start at submit then costs what the nodes
it looks at cost, not one walk of every node per pass.

Also kept here, for the same reason: the nodes of a partition that could ever hold a
job of a given shape and constraints (``Asks``'s candidates), which depend only on what
does not change with allocations (``static``); any change to those facts starts over.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from ctld.sched.model import NodeView

# what a candidate list depends on: a change to any of these starts the index anew
Static = tuple[object, ...]


def static(view: NodeView) -> Static:
    return (
        view.name,
        view.cpus_total,
        view.mem_total_mb,
        view.gpus_total,
        view.gpu_type,
        view.schedulable,
        view.gpu_indices,
        view.shards_per_gpu,
        view.features,
    )


def gpu_count(view: NodeView) -> int:
    """All the node's GPUs (a profile's ``all_gpus``)."""
    return len(view.gpu_indices) if view.gpu_indices is not None else view.gpus_total


class NodeIndex:
    """Positions by name, and each free GPU count's nodes (positions, ascending)."""

    def __init__(self, nodes: tuple[NodeView, ...]) -> None:
        self.nodes = nodes
        self.position = {v.name: i for i, v in enumerate(nodes)}
        self.max_gpus = max((gpu_count(v) for v in nodes), default=0)
        self.buckets: list[list[int]] = [[] for _ in range(self.max_gpus + 1)]
        for i, v in enumerate(nodes):
            self.buckets[len(v.gpus_free)].append(i)
        # Asks' candidates, by their key (ask.py): valid while no static fact changed
        self.candidates: dict[tuple[object, ...], tuple[object, ...]] = {}

    def changed_to(self, nodes: tuple[NodeView, ...]) -> bool:
        """Follow ``nodes``, a later snapshot's, in place; False when it differs in more
        than allocations (a new index is needed)."""
        old = self.nodes
        if nodes is old:
            return True
        if len(nodes) != len(old):
            return False
        changed = [i for i, a, b in zip(range(len(old)), old, nodes, strict=True) if a is not b]
        if len(changed) > len(nodes) // 4 + 16:
            return False  # as cheap to start over
        if any(static(old[i]) != static(nodes[i]) for i in changed):
            return False
        buckets = self.buckets
        for i in changed:
            before, after = len(old[i].gpus_free), len(nodes[i].gpus_free)
            if before != after:
                bucket = buckets[before]
                del bucket[bisect_left(bucket, i)]
                insort(buckets[after], i)
        self.nodes = nodes
        return True


_last: list[NodeIndex] = []  # the last snapshot's index (one: passes run one at a time)


def node_index(nodes: tuple[NodeView, ...]) -> NodeIndex:
    """The index of ``nodes``: the last one followed to them, or a new one."""
    if _last and _last[0].changed_to(nodes):
        return _last[0]
    index = NodeIndex(nodes)
    _last[:] = [index]
    return index
