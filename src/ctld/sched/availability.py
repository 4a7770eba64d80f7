"""What the nodes have to give over one pass: the pass's one mutable picture of them.

Built from the snapshot alone: each node's profile (profile.py: free now, what the
running jobs give back when, what advance reservations and preemptors' claims hold
for whom); then changed only through ``take`` (a start) and ``hold`` (a reservation
the pass makes, a claim), each of which moves ``version`` on, so that what was
searched for at one version (the forecaster's cache) is known stale at the next.

A node's profile is made when the pass first looks at the node (``nodes[name]``), from
its view, the running jobs placed on it, its power state, the reservations, the
claims and a requeued job's claim (reclaim.py) on it, in that order, exactly as if
every profile were made up front: a pass that starts one job on a 12,500-node cluster
makes the profiles of the nodes it looked at only. The lookups by name and by free GPU
count come from the snapshot's ``NodeIndex`` (nodeindex.py), kept between passes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

from ctld.sched import preempt, reclaim
from ctld.sched.model import (
    Claim,
    JobRequest,
    Placement,
    ReservationView,
    RunningView,
    Snapshot,
)
from ctld.sched.nodeindex import NodeIndex, node_index
from ctld.sched.predict import expected_end
from ctld.sched.profile import Hold, NodeProfile, Release


class Availability:
    def __init__(self, snap: Snapshot, reclaimers: tuple[JobRequest, ...] = ()) -> None:
        self.index: NodeIndex = node_index(snap.nodes)
        self.views = snap.nodes
        self.nodes = Profiles(snap, self.index, reclaimers)
        # the nodes requeued jobs claim back (reclaim.py): never a partition's spares
        self.reclaimed = frozenset(self.nodes.reclaims)
        self.made = self.nodes.made  # the profiles made so far
        self.version = 0  # moved on by every take and hold
        # nodes by free GPU count: best fit looks at the fullest nodes first and stops
        # there, instead of scanning the whole cluster for every start; the index's
        # buckets less the nodes a take moved (``moved``), then those, in move order
        self.max_gpus = self.index.max_gpus
        self.moved: set[str] = set()
        self.moved_to: list[dict[str, None]] = [{} for _ in range(self.max_gpus + 1)]

    def bucket(self, free_gpus: int) -> Iterator[str]:
        """The names of the nodes with ``free_gpus`` free GPUs now: by their place in
        the snapshot, then those that a take in this pass brought down to it."""
        views, moved = self.views, self.moved
        for i in self.index.buckets[free_gpus]:
            name = views[i].name
            if name not in moved:
                yield name
        yield from self.moved_to[free_gpus]

    def take(
        self,
        node: NodeProfile,
        cpus: int,
        mem: int,
        gpus: tuple[int, ...],
        end: float,
        job_id: int,
        limit_end: float,
        shards: int,
    ) -> None:
        """A start's part on ``node``, from now (see NodeProfile.take_now)."""
        before = len(node.free_gpus)
        node.take_now(cpus, mem, gpus, end, job_id, limit_end, shards)
        if len(node.free_gpus) != before:
            self.moved.add(node.name)
            self.moved_to[before].pop(node.name, None)
            self.moved_to[len(node.free_gpus)][node.name] = None
        self.version += 1

    def hold(self, node: NodeProfile, hold: Hold) -> None:
        """Keep part of ``node`` for ``hold.owner`` over the hold's time."""
        node.hold(hold)
        self.version += 1


class Profiles(Mapping[str, NodeProfile]):
    """The pass's profiles by node name, each made on first look from what the snapshot
    puts on the node. (It holds no reference back to its ``Availability``: the pass's
    objects are then all freed by reference counting when it ends, not left to the
    cyclic collector, which ctld pauses during a pass.)"""

    def __init__(
        self, snap: Snapshot, index: NodeIndex, reclaimers: tuple[JobRequest, ...] = ()
    ) -> None:
        self.now = snap.now
        self.predict = snap.settings.predict
        self.views = snap.nodes
        self.position = index.position
        self.made: dict[str, NodeProfile] = {}
        # jobs being preempted: their end is their preemption's deadline, not a prediction
        self.preempted = {v for c in snap.claims for v in c.victims}
        # what each node's profile is made with, by node, in the snapshot's order. The
        # running jobs' placements by node as plain numbers (run * width + placement):
        # a container per node would be 12,500 more objects for the collector each pass
        self.running = snap.running
        self.width = max((len(r.placements) for r in snap.running), default=0) + 1
        self.first_run: dict[str, int] = {}  # the first placement on each node
        self.more_runs: dict[str, list[int]] = {}  # the others, in order
        first, width = self.first_run, self.width
        for i, run in enumerate(snap.running):
            for k, p in enumerate(run.placements):
                if p.node in first:
                    self.more_runs.setdefault(p.node, []).append(i * width + k)
                else:
                    first[p.node] = i * width + k
        self.resvs: dict[str, list[ReservationView]] = {}
        for resv in snap.reservations:
            if resv.end > self.now:
                for name in resv.nodes:
                    self.resvs.setdefault(name, []).append(resv)
        self.claims: dict[str, list[tuple[Claim, Placement, frozenset[int]]]] = {}
        for claim in snap.claims:
            victims = frozenset(claim.victims)
            for p in claim.placements:
                self.claims.setdefault(p.node, []).append((claim, p, victims))
        self.reclaims: dict[str, list[JobRequest]] = {}
        for req in reclaimers:
            for name in req.reclaim:
                if name in self.position:
                    self.reclaims.setdefault(name, []).append(req)

    def __getitem__(self, name: str) -> NodeProfile:
        made = self.made.get(name)
        return made if made is not None else self.profile(name)

    def __contains__(self, name: object) -> bool:
        return name in self.position

    def __iter__(self) -> Iterator[str]:
        return iter(self.position)

    def __len__(self) -> int:
        return len(self.position)

    def profile(self, name: str) -> NodeProfile:
        """``name``'s profile (made now if it is the first look at it; KeyError: no
        such node)."""
        made = self.made.get(name)
        if made is not None:
            return made
        i = self.position[name]
        view = self.views[i]
        node = self.made[name] = NodeProfile.from_view(view, i)
        now = node.clock = self.now
        for run, p in self._runs_on(name):
            end = limit_end = max(run.end_time, now + 1.0)  # overrunning: about to end
            if self.predict and run.predicted_s > 0 and run.job_id not in self.preempted:
                end = expected_end(run.start_time, run.predicted_s, run.end_time, now)
                end = max(end, now + 1.0)
            if p.shards and p.gpu_indices:
                # its shards come back at its end; the GPU, when its last sharer's do
                whole = frozenset(p.gpu_indices[1:])
                node.releases.append(Release(end, p.cpus, p.mem_mb, whole, run.job_id, limit_end))
                node.share_until(p.gpu_indices[0], end, limit_end)
            else:
                node.releases.append(
                    Release(end, p.cpus, p.mem_mb, frozenset(p.gpu_indices), run.job_id, limit_end)
                )
        if view.available_at > now:  # powered down or powering up: busy until it boots
            node.hold(
                Hold(now, view.available_at, view.cpus_total, view.mem_total_mb,
                     node.all_gpus, owner="power")
            )  # fmt: skip
        for resv in self.resvs.get(name, ()):
            node.hold(
                Hold(
                    start=resv.start,
                    end=resv.end,
                    cpus=view.cpus_total,
                    mem=view.mem_total_mb,
                    gpus=node.all_gpus,
                    owner=f"resv:{resv.name}",
                )
            )
        for claim, p, victims in self.claims.get(name, ()):
            owner = preempt.claim_owner(claim.job_id)
            gpus = p.gpu_indices
            for h in preempt.claim_holds(node, owner, p.cpus, p.mem_mb, gpus, victims, now):
                node.hold(h)
        for req in self.reclaims.get(name, ()):
            node.hold(reclaim.hold(req, view, node.free_gpus, now))
        return node

    def _runs_on(self, name: str) -> list[tuple[RunningView, Placement]]:
        """The running jobs' placements on ``name``, in the snapshot's order."""
        code = self.first_run.get(name)
        if code is None:
            return []
        width, running = self.width, self.running
        return [
            (running[c // width], running[c // width].placements[c % width])
            for c in (code, *self.more_runs.get(name, ()))
        ]


class NodeSeq(Sequence[NodeProfile]):
    """Named nodes' profiles, in order, made as they are reached (a candidate's nodes)."""

    __slots__ = ("every", "names", "profiles")

    def __init__(self, names: tuple[str, ...], profiles: Profiles) -> None:
        self.names = names
        self.profiles = profiles
        self.every: tuple[NodeProfile, ...] | None = None  # all made: walked as a tuple

    @overload
    def __getitem__(self, i: int) -> NodeProfile: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[NodeProfile]: ...
    def __getitem__(self, i: int | slice) -> NodeProfile | Sequence[NodeProfile]:
        if isinstance(i, slice):
            return NodeSeq(self.names[i], self.profiles)
        return self.profiles[self.names[i]]

    def __iter__(self) -> Iterator[NodeProfile]:
        every = self.every
        return iter(every) if every is not None else self._walk()

    def _walk(self) -> Iterator[NodeProfile]:
        get = self.profiles.__getitem__
        walked = []
        for name in self.names:
            node = get(name)
            walked.append(node)
            yield node
        self.every = tuple(walked)  # (a profile, once made, is the pass's for good)

    def __len__(self) -> int:
        return len(self.names)
