"""The scheduler's view of every node (``NodeView``), made again only for nodes that changed.

A node's view is a function of its allocations (``alloc_rev``, moved on by every
allocate and release), its registration (its ``resources`` object), whether it is
schedulable, and for a node that is off or booting the time (``power_plan``). A
NodeRecord logs its name when one of those inputs is set (``nodes.VIEW_INPUTS``,
``VIEW_CHANGES``), so a build looks only at the nodes named since the last one and
the ones not powered on: at 12,500 nodes, a start at submit no longer checks every
node's memo. Anything else (a node added, removed or replaced; the log started over)
rebuilds all.
The tuple itself is returned again while no view changed (the core keeps what it
derives from the nodes while they are the same objects: sched/nodeindex.py).
"""

from __future__ import annotations

import operator

from corral.config import ClusterConfig
from ctld.model import power_plan
from ctld.model.nodes import POWER_ON, VIEW_CHANGES, NodeRecord
from ctld.sched import NodeView


class NodeViews:
    def __init__(self) -> None:
        # node name -> (alloc_rev, resources, (schedulable, available_at), view)
        self.memos: dict[str, tuple[int, object, tuple[bool, float], NodeView]] = {}
        self.records: tuple[NodeRecord, ...] = ()  # the last build's nodes, in order
        self.position: dict[str, int] = {}
        self.views: tuple[NodeView, ...] = ()
        self.epoch, self.read = -1, 0  # how far VIEW_CHANGES was read
        self.unpowered: set[str] = set()  # not powered on: their views move with time

    def build(
        self, nodes: dict[str, NodeRecord], config: ClusterConfig, now: float
    ) -> tuple[NodeView, ...]:
        records = self.records
        log = VIEW_CHANGES
        if (
            log.epoch != self.epoch
            or len(nodes) != len(records)
            or not all(map(operator.is_, nodes.values(), records))
        ):
            return self._all(nodes, config, now)
        changed = set(log.log[self.read :])
        self.read = len(log.log)
        if not changed and not self.unpowered:
            return self.views
        views = list(self.views)
        position = self.position
        for name in changed | self.unpowered:
            i = position.get(name, -1)
            if i < 0:
                continue  # another cluster's node (tests run several in one process)
            n = records[i]
            views[i] = self._view(n, config, now)
            if n.power == POWER_ON:
                self.unpowered.discard(name)
            else:
                self.unpowered.add(name)
        return self._keep(views)

    def _all(
        self, nodes: dict[str, NodeRecord], config: ClusterConfig, now: float
    ) -> tuple[NodeView, ...]:
        self.records = tuple(nodes.values())
        self.position = {n.name: i for i, n in enumerate(self.records)}
        self.epoch, self.read = VIEW_CHANGES.epoch, len(VIEW_CHANGES.log)
        self.unpowered = {n.name for n in self.records if n.power != POWER_ON}
        if len(self.memos) > 2 * len(nodes) + 1024:  # forget removed nodes
            self.memos = {k: v for k, v in self.memos.items() if k in nodes}
        return self._keep([self._view(n, config, now) for n in self.records])

    def _keep(self, views: list[NodeView]) -> tuple[NodeView, ...]:
        last = self.views
        if len(last) == len(views) and all(map(operator.is_, last, views)):
            return last
        self.views = tuple(views)
        return self.views

    def _view(self, n: NodeRecord, config: ClusterConfig, now: float) -> NodeView:
        if n.power == POWER_ON:  # the usual case: nothing to plan on a power-up
            schedulable, available_at = n.schedulable, 0.0
        else:
            schedulable = n.schedulable or power_plan.plannable(n)
            available_at = power_plan.available_at(n, config, now)
        memo = self.memos.get(n.name)
        if (
            memo is not None
            and memo[0] == n.alloc_rev
            and memo[1] is n.resources
            and memo[2] == (schedulable, available_at)
        ):
            return memo[3]
        view = NodeView(
            name=n.name,
            cpus_total=n.resources.cpus,
            mem_total_mb=n.resources.memory_mb,
            gpus_total=len(n.resources.gpus),
            cpus_free=max(0, n.resources.cpus - n.alloc_cpus),
            mem_free_mb=max(0, n.resources.memory_mb - n.alloc_mem_mb),
            gpus_free=tuple(
                i for i in n.gpu_indices if i not in n.alloc_gpus and i not in n.alloc_shards
            ),
            gpu_type=n.gpu_type,
            schedulable=schedulable,
            idle=not n.job_ids,
            gpu_indices=n.gpu_indices,
            shards_per_gpu=n.config.gpus.shards_per_gpu,
            shards_used=tuple(sorted(n.alloc_shards.items())),
            features=n.features,  # from its resources: a registration makes a new view
            available_at=available_at,  # power saving: busy until it boots (power_plan)
        )
        self.memos[n.name] = (n.alloc_rev, n.resources, (schedulable, available_at), view)
        return view
