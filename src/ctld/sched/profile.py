"""One node's resources over time within a pass: free now, freed later, held later.

A node's availability at time t is what is free now, plus what running jobs ending by t
give back, minus what reservations (advance ones, and the backfill reservations made
earlier in this pass) hold at t. A running job ends when it is expected to (its
prediction) or, counted "by limits", when it would be killed at the latest. Running
jobs only ever give resources back, so over a window [t0, t1) the least available is
at t0 or at the start of a hold inside it: those are the only instants a check has
to look at.

Shards (GPU sharing): a GPU holding shard jobs is not free; it comes back whole when the
last of them ends (one release of that GPU alone, at their latest end). Until then only
its shards left now can be given, and only to a job that ends before any hold on that
GPU begins: a shared GPU is never planned on at a later instant.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from dataclasses import dataclass, field

from ctld.sched.model import NodeView
from ctld.sched.shape import Shape


@dataclass(frozen=True)
class Release:
    end: float
    cpus: int
    mem: int
    gpus: frozenset[int]
    job_id: int
    limit_end: float = -1.0  # when it is killed at the latest; -1: ``end``

    @property
    def last(self) -> float:
        return self.end if self.limit_end < 0 else self.limit_end


@dataclass(frozen=True)
class Hold:
    start: float
    end: float
    cpus: int
    mem: int
    gpus: frozenset[int]
    owner: str  # "resv:NAME", "job:ID" or "guard:ID" (a starving job's)


@dataclass(frozen=True)
class Avail:
    cpus: int
    mem: int
    gpus: frozenset[int]
    empty: bool  # nothing runs or is held: what --exclusive needs
    # GPUs in shard use that a shard job may join over the window: (index, shards left)
    room: tuple[tuple[int, int], ...] = ()


@dataclass
class NodeProfile:
    view: NodeView
    index: int  # position in the snapshot, for deterministic ties
    free_cpus: int
    free_mem: int
    free_gpus: set[int]
    all_gpus: frozenset[int]
    busy: bool  # something runs on it now
    name: str = ""  # the view's (a plain attribute: read for every node in a search)
    releases: list[Release] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    # releases sorted by end with running sums, rebuilt when a release is added: what
    # is given back by t is one bisect away instead of a scan of every running job
    _index_len: int = -1
    _ends: list[float] = field(default_factory=list)
    _cum: list[tuple[int, int, frozenset[int]]] = field(default_factory=list)
    # the same by limit ends, built only when something is planned by limits
    _lindex_len: int = -1
    _lends: list[float] = field(default_factory=list)
    _lcum: list[tuple[int, int, frozenset[int]]] = field(default_factory=list)
    shards_per_gpu: int = 0
    shard_free: dict[int, int] = field(default_factory=dict)  # shared GPU -> shards left
    # each shared GPU's release: it comes back whole when its last shard job ends
    shard_back: dict[int, Release] = field(default_factory=dict)
    clock: float = -1.0  # the pass's "now": shared GPUs are offered at this instant only

    @classmethod
    def from_view(cls, view: NodeView, index: int) -> NodeProfile:
        indices = view.gpu_indices if view.gpu_indices is not None else range(view.gpus_total)
        return cls(
            view=view,
            index=index,
            free_cpus=view.cpus_free,
            free_mem=view.mem_free_mb,
            free_gpus=set(view.gpus_free),
            all_gpus=frozenset(indices),
            busy=not view.idle or bool(view.shards_used),
            name=view.name,
            shards_per_gpu=view.shards_per_gpu,
            shard_free={g: view.shards_per_gpu - used for g, used in view.shards_used},
        )

    def could_ever_fit(self, shape: Shape, gpu_type: str) -> bool:
        return could_ever_fit(self.view, shape, gpu_type)

    def _index(self) -> None:
        ordered = sorted(self.releases, key=lambda r: r.end)
        self._ends = [r.end for r in ordered]
        cpus, mem, gpus = 0, 0, frozenset[int]()
        self._cum = [(0, 0, gpus)]
        for r in ordered:
            cpus, mem, gpus = cpus + r.cpus, mem + r.mem, gpus | r.gpus
            self._cum.append((cpus, mem, gpus))
        self._index_len = len(self.releases)

    def _index_limits(self) -> None:
        self._lends, self._lcum = _running_sums(self.releases)
        self._lindex_len = len(self.releases)

    def _at(self, t: float, ignore: str, limits: bool = False) -> Avail:
        if limits:
            if self._lindex_len != len(self.releases):
                self._index_limits()
            ends, cum = self._lends, self._lcum
        else:
            if self._index_len != len(self.releases):
                self._index()
            ends, cum = self._ends, self._cum
        k = bisect_right(ends, t)
        back_cpus, back_mem, back_gpus = cum[k]
        cpus, mem = self.free_cpus + back_cpus, self.free_mem + back_mem
        gpus = set(self.free_gpus) | back_gpus if back_gpus else set(self.free_gpus)
        running = self.busy
        if running:
            running = k < len(ends) or not self.releases
        held = False
        for h in self.holds:
            if h.owner != ignore and h.start <= t < h.end:
                cpus -= h.cpus
                mem -= h.mem
                gpus -= h.gpus
                held = True
        return Avail(cpus, mem, frozenset(gpus), empty=not running and not held)

    def may_fit_at(self, t: float, shape: Shape, limits: bool = False) -> bool:
        """False when, holds aside, not enough is free at ``t`` for ``shape``: a cheap
        test before ``window`` (released GPUs are never free ones, so counts add)."""
        if limits:
            if self._lindex_len != len(self.releases):
                self._index_limits()
            ends, cum = self._lends, self._lcum
        else:
            if self._index_len != len(self.releases):
                self._index()
            ends, cum = self._ends, self._cum
        back_cpus, back_mem, back_gpus = cum[bisect_right(ends, t)]
        return (
            self.free_cpus + back_cpus >= shape.cpus_per_node
            and self.free_mem + back_mem >= shape.mem_per_node_mb
            and len(self.free_gpus) + len(back_gpus) >= shape.gpus_per_node
        )

    def window(
        self,
        t0: float,
        t1: float,
        ignore: str = "",
        t1_jobs: float | None = None,
        limits: bool = False,
        shared: bool = False,
    ) -> Avail:
        """What stays available for the whole of [t0, t1).

        With ``t1_jobs`` the reserved jobs' holds ("job:") are only checked up to it (a
        predicted end); advance reservations' ("resv:") and starving jobs' ("guard:") up
        to ``t1`` (the limit). A starving job's hold is checked with every job running
        to its limit, as ``limits`` checks every instant: a wrong prediction then can
        not make room that is not there. ``shared``: with the shared GPUs a shard job
        may join (starting now only: forecasts and reservations plan on whole GPUs, so
        that no hold is ever made on shards a later start could take).
        """
        jobs_end = t1 if t1_jobs is None else min(t1_jobs, t1)
        best = self._at(t0, ignore, limits)
        if shared and self.shard_free and t0 <= self.clock:
            best = dataclasses.replace(best, room=self._room(t0, t1, jobs_end, ignore))
        for h in self.holds:
            horizon = jobs_end if h.owner.startswith("job:") else t1
            if h.owner != ignore and t0 < h.start < horizon:
                at = self._at(h.start, ignore, limits or h.owner.startswith("guard:"))
                best = Avail(
                    min(best.cpus, at.cpus),
                    min(best.mem, at.mem),
                    best.gpus & at.gpus,
                    best.empty and at.empty,
                    best.room,
                )
        return best

    def _room(
        self, t0: float, t1: float, jobs_end: float, ignore: str
    ) -> tuple[tuple[int, int], ...]:
        """Shared GPUs with shards left that no hold claims during [t0, t1): a hold on a
        shared GPU was planned for when it comes back whole, which a job joining it
        would push back."""
        held: set[int] = set()
        for h in self.holds:
            horizon = jobs_end if h.owner.startswith("job:") else t1
            if h.owner != ignore and h.start < horizon and h.end > t0:
                held |= h.gpus
        return tuple(
            (g, left) for g, left in sorted(self.shard_free.items()) if left and g not in held
        )

    def shard_pick(self, avail: Avail, shards: int, fresh_ok: bool = True) -> tuple[int, int]:
        """Best fit for ``shards`` on this node: (GPU, shards it has left after), the
        shared GPU with the fewest left that fit, else the lowest free GPU (-1: none)."""
        best = (-1, -1)
        for g, left in avail.room:
            if left >= shards and (best[0] < 0 or left < best[1] + shards):
                best = (g, left - shards)
        if best[0] < 0 and fresh_ok and avail.gpus:
            best = (min(avail.gpus), self.shards_per_gpu - shards)
        return best

    def fits(self, avail: Avail, shape: Shape, exclusive: bool) -> bool:
        shards = shape.shards_per_node
        if exclusive:
            if shards and not avail.gpus and not any(s >= shards for _, s in avail.room):
                return False
            return avail.empty and avail.cpus >= self.view.cpus_total
        if not (avail.cpus >= shape.cpus_per_node and avail.mem >= shape.mem_per_node_mb):
            return False
        if shards:
            # a shared GPU with room, or one more free GPU to share
            if len(avail.gpus) > shape.gpus_per_node:
                return True
            return len(avail.gpus) == shape.gpus_per_node and any(
                s >= shards for _, s in avail.room
            )
        return len(avail.gpus) >= shape.gpus_per_node

    def take_now(
        self,
        cpus: int,
        mem: int,
        gpus: tuple[int, ...],
        end: float,
        job_id: int,
        limit_end: float = -1.0,
        shards: int = 0,
    ) -> None:
        self.free_cpus -= cpus
        self.free_mem -= mem
        self.busy = True
        if shards:
            # shards of gpus[0]: the GPU turns shared (if it was free) and comes back
            # whole only when its last shard job has ended
            g, whole = gpus[0], frozenset(gpus[1:])
            if g in self.free_gpus:
                self.free_gpus.discard(g)
                self.shard_free[g] = self.shards_per_gpu
            self.shard_free[g] -= shards
            self.free_gpus.difference_update(whole)
            self.releases.append(Release(end, cpus, mem, whole, job_id, limit_end))
            self.share_until(g, end, limit_end)
            return
        self.free_gpus.difference_update(gpus)
        self.releases.append(Release(end, cpus, mem, frozenset(gpus), job_id, limit_end))

    def share_until(self, g: int, end: float, limit_end: float) -> None:
        """Shared GPU ``g`` holds a shard job until ``end`` (``limit_end`` at the
        latest): its whole-GPU release moves to the latest such end (job id 0: no one
        job's end frees it, and no preemption)."""
        old = self.shard_back.get(g)
        last = end if limit_end < 0 else limit_end
        if old is not None:
            if old.end >= end and old.last >= last:
                return
            self.releases.remove(old)
            end, last = max(end, old.end), max(last, old.last)
        back = Release(end, 0, 0, frozenset((g,)), 0, last)
        self.shard_back[g] = back
        self.releases.append(back)
        self._index_len = self._lindex_len = -1  # a release changed in place

    def hold(self, hold: Hold) -> None:
        self.holds.append(hold)


def could_ever_fit(view: NodeView, shape: Shape, gpu_type: str) -> bool:
    """Whether ``view``'s node, empty, would hold ``shape`` (of GPU type ``gpu_type``)."""
    shards = shape.shards_per_node
    if gpu_type and (shape.gpus_per_node or shards) and view.gpu_type != gpu_type:
        return False
    if shards and shards > view.shards_per_gpu:
        return False
    gpus = len(view.gpu_indices) if view.gpu_indices is not None else view.gpus_total
    return (
        shape.cpus_per_node <= view.cpus_total
        and shape.mem_per_node_mb <= view.mem_total_mb
        and shape.gpus_per_node + (1 if shards else 0) <= gpus
    )


def _running_sums(
    releases: list[Release],
) -> tuple[list[float], list[tuple[int, int, frozenset[int]]]]:
    """Limit ends, sorted, and what has come back by each: (cpus, mem, gpus)."""
    ordered = sorted(releases, key=lambda r: r.last)
    cpus, mem, gpus = 0, 0, frozenset[int]()
    cum = [(0, 0, gpus)]
    for r in ordered:
        cpus, mem, gpus = cpus + r.cpus, mem + r.mem, gpus | r.gpus
        cum.append((cpus, mem, gpus))
    return [r.last for r in ordered], cum
