"""Later: the earliest time a blocked job fits (a walk over the instants where something
frees up), where, and for the top jobs the hold that keeps it for them."""

from __future__ import annotations

from collections.abc import Iterable

from ctld.sched.ask import Ask, Candidate
from ctld.sched.availability import Availability
from ctld.sched.model import INFINITY, Forecast, JobRequest, Snapshot
from ctld.sched.placing import Placer, pick_gpus
from ctld.sched.profile import Avail, Hold, NodeProfile

Found = tuple[float, list[tuple[NodeProfile, Avail]]]  # when, and the nodes chosen then


class Forecaster:
    """A blocked job's forecast, with a hold for the reserved ones and the stacked ones."""

    def __init__(self, snap: Snapshot, avail: Availability, placer: Placer) -> None:
        self.now = snap.now
        self.predict = snap.settings.predict
        self.stack_forecasts = snap.settings.stack_forecasts
        self.avail = avail
        self.placer = placer
        # search key -> (availability version, what it found then)
        self.cache: dict[tuple[object, ...], tuple[int, Forecast | None]] = {}
        # forecasts made once the pass's starts are all decided hold their slot, so
        # that each later forecast queues behind them (never changes a start)
        self.stacking = False
        self.stacked = 0

    def earliest(
        self, req: JobRequest, ask: Ask, reserve: bool, guard: bool = False
    ) -> Forecast | None:
        """The earliest start of ``req`` on any of its candidates (None: never), held
        for it if ``reserve`` (or stacked). A ``guard`` job (the starving one) is
        planned as EASY plans it, every job running to its limit, and its hold is
        kept against the others' limits, so that no wrong prediction pushes it back."""
        best: tuple[float, Candidate, list[tuple[NodeProfile, Avail]]] | None = None
        for cand in ask.candidates:
            found = self.earliest_in(req, ask, cand, guard)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], cand, found[1])
        if best is None:
            return None
        t, cand, chosen = best
        shown = t
        if guard and self.predict:
            # what it is told is still the likely start, by the predictions
            likely = [self.earliest_in(req, ask, c) for c in ask.candidates]
            shown = min([t] + [found[0] for found in likely if found is not None])
        waits_for = sorted(
            {
                r.job_id
                for node, _ in chosen
                for r in node.releases
                if self.now < r.end <= t and r.job_id > 0
            }
        )
        stack = self.stacking and self.stacked < self.stack_forecasts
        if stack:
            self.stacked += 1
        if reserve or stack:
            self._hold(req, ask, t, chosen, "guard" if guard else "job")
        return Forecast(
            job_id=req.job_id,
            start=shown,
            partition=cand.partition.name,
            nodes=tuple(n.name for n, _ in chosen),
            reserved=reserve,
            waits_for=tuple(waits_for),
        )

    def _hold(
        self,
        req: JobRequest,
        ask: Ask,
        t: float,
        chosen: list[tuple[NodeProfile, Avail]],
        kind: str,
    ) -> None:
        shape = ask.shape
        for node, avail in chosen:
            if req.exclusive:
                cpus, mem, gpus = node.view.cpus_total, node.view.mem_total_mb, node.all_gpus
            else:
                cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                # a shard job is planned on a whole GPU of its own (a shared one
                # is never planned on later than now)
                count = shape.gpus_per_node + (1 if shape.shards_per_node else 0)
                gpus = frozenset(pick_gpus(avail.gpus, count))
            hold = Hold(t, t + ask.expected, cpus, mem, gpus, owner=f"{kind}:{req.job_id}")
            self.avail.hold(node, hold)

    def earliest_in(
        self, req: JobRequest, ask: Ask, cand: Candidate, limits: bool = False
    ) -> Found | None:
        duration, expected = ask.duration, ask.expected
        key: tuple[object, ...] = (cand.partition.name, ask.shape, req.gpu_type, req.exclusive)
        key += (cand.required, req.exclude, cand.ignore, duration, expected, limits)
        version = self.avail.version
        cached = self.cache.get(key)
        if cached is not None and cached[0] == version and cached[1] is not None:
            hit = cached[1]
            end, job_end = hit.start + duration, hit.start + expected
            nodes = self.avail.nodes
            return hit.start, [
                (nodes[n], nodes[n].window(hit.start, end, cand.ignore, job_end, limits))
                for n in hit.nodes
            ]
        if cached is not None and cached[0] == version:
            return None
        result = self._search(req, ask, cand, limits)
        if result is None:
            self.cache[key] = (version, None)
        else:
            names = tuple(n.name for n, _ in result[1])
            self.cache[key] = (
                version,
                Forecast(req.job_id, result[0], cand.partition.name, names, False),
            )
        return result

    def _search(self, req: JobRequest, ask: Ask, cand: Candidate, limits: bool) -> Found | None:
        shape, duration, expected = ask.shape, ask.duration, ask.expected
        # Walk the instants where something frees up; between them nothing can change,
        # except on nodes with holds (a sliding window may reach a hold's start).
        events: dict[float, list[NodeProfile]] = {}
        for node in cand.nodes:
            for r in node.releases:
                end = r.last if limits else r.end
                if end > self.now and end != INFINITY:
                    events.setdefault(end, []).append(node)
            for h in node.holds:
                if h.end > self.now and h.end != INFINITY:
                    events.setdefault(h.end, []).append(node)
        first = max(self.now, cand.not_before)
        times = sorted(t for t in events if t > first)
        with_holds = [n for n in cand.nodes if n.holds]
        fitting: dict[str, tuple[NodeProfile, Avail]] = {}
        # the hot spares are kept as they are now (placing.py): planned for no one else
        spares = self.placer.spares(cand) if not req.spares_ok else frozenset()

        def check(nodes: Iterable[NodeProfile], t: float) -> None:
            for node in nodes:
                if node.name in spares:
                    continue
                if not req.exclusive and not node.may_fit_at(t, shape, limits):
                    fitting.pop(node.name, None)  # holds only take away: no fit either
                    continue
                avail = node.window(t, t + duration, cand.ignore, t + expected, limits)
                if node.fits(avail, shape, req.exclusive):
                    fitting[node.name] = (node, avail)
                else:
                    fitting.pop(node.name, None)

        check(cand.nodes, first)
        for t in [first, *times]:
            if t != first:
                check(events[t], t)
                check(with_holds, t)
            if t + duration > cand.not_after:
                return None
            chosen = self.placer.choose(list(fitting.values()), shape, cand, t, t + expected)
            if chosen is not None:
                return t, chosen
        return None
