"""Later: the reason a blocked job waits, the earliest time it fits (a walk over the
instants where something frees up) and, for the top jobs, the hold that reserves it."""

from __future__ import annotations

from collections.abc import Iterable

from ctld.sched.model import INFINITY, Forecast, JobRequest
from ctld.sched.pass_state import PRIORITY, RESERVATION, RESOURCES, Candidate
from ctld.sched.placing import Placing, pick_gpus
from ctld.sched.profile import Avail, Hold, NodeProfile
from ctld.sched.shape import Shape


class Forecasting(Placing):
    """A job that cannot start now: its reason, and for the first ones a forecast (with a
    reservation for the first ``reserve_depth``)."""

    def blocked(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[Candidate],
        duration: float,
        expected: float,
    ) -> None:
        later = self.later.get(req.klass)
        if (
            later is not None
            and req.job_id not in self.starving
            and self.reserved >= self.settings.reserve_depth
            and self.forecasted >= self.settings.forecast_depth
        ):
            self.reasons[req.job_id] = later  # what blocked() below would decide
            return
        queued_behind = any(c.partition.name in self.blocked_partitions for c in candidates)
        waiting_for_resv = all(self.now < c.not_before for c in candidates)
        self.blocked_partitions.update(c.partition.name for c in candidates)
        if not self.settings.backfill:
            self.fcfs_blocked = True
        reserve = self.reserved < self.settings.reserve_depth
        if reserve or self.forecasted < self.settings.forecast_depth:
            forecast = self.earliest(req, shape, candidates, duration, expected, reserve)
            if forecast is not None:
                self.forecasts[req.job_id] = forecast
                if reserve:
                    self.reserved += 1
                else:
                    self.forecasted += 1
        if waiting_for_resv:
            self.reasons[req.job_id] = RESERVATION
        elif queued_behind:
            self.reasons[req.job_id] = PRIORITY
        else:
            self.reasons[req.job_id] = RESOURCES
        # its class-mates queue behind it: their partitions are blocked from now on
        self.later[req.klass] = RESERVATION if waiting_for_resv else PRIORITY

    def earliest(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[Candidate],
        duration: float,
        expected: float,
        reserve: bool,
    ) -> Forecast | None:
        best: tuple[float, Candidate, list[tuple[NodeProfile, Avail]]] | None = None
        # a starving job's start is planned as EASY plans it: every job running to its limit
        limits = req.job_id in self.starving
        for cand in candidates:
            found = self.earliest_in(req, shape, cand, duration, expected, limits)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], cand, found[1])
        if best is None:
            return None
        t, cand, chosen = best
        shown = t
        if limits and self.predict:
            # what it is told is still the likely start, by the predictions
            likely = [self.earliest_in(req, shape, c, duration, expected) for c in candidates]
            shown = min([t] + [found[0] for found in likely if found is not None])
        waits_for = sorted(
            {
                r.job_id
                for node, _ in chosen
                for r in node.releases
                if self.now < r.end <= t and r.job_id > 0
            }
        )
        stack = self.stacking and self.stacked < self.settings.stack_forecasts
        if stack:
            self.stacked += 1
        if reserve or stack:
            for node, avail in chosen:
                if req.exclusive:
                    cpus, mem, gpus = node.view.cpus_total, node.view.mem_total_mb, node.all_gpus
                else:
                    cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                    # a shard job is planned on a whole GPU of its own (a shared one
                    # is never planned on later than now)
                    count = shape.gpus_per_node + (1 if shape.shards_per_node else 0)
                    gpus = frozenset(pick_gpus(avail.gpus, count))
                # a starving job's hold is kept against the others' limits, so no wrong
                # prediction can push it back ("guard:"); the rest's against predictions
                kind = "guard" if req.job_id in self.starving else "job"
                node.hold(Hold(t, t + expected, cpus, mem, gpus, owner=f"{kind}:{req.job_id}"))
            self.profile_version += 1
        return Forecast(
            job_id=req.job_id,
            start=shown,
            partition=cand.partition.name,
            nodes=tuple(n.name for n, _ in chosen),
            reserved=reserve,
            waits_for=tuple(waits_for),
        )

    def earliest_in(
        self,
        req: JobRequest,
        shape: Shape,
        cand: Candidate,
        duration: float,
        expected: float,
        limits: bool = False,
    ) -> tuple[float, list[tuple[NodeProfile, Avail]]] | None:
        key: tuple[object, ...] = (cand.partition.name, shape, req.gpu_type, req.exclusive)
        key += (cand.required, req.exclude, cand.ignore, duration, expected, limits)
        cached = self.forecast_cache.get(key)
        if cached is not None and cached[0] == self.profile_version and cached[1] is not None:
            hit = cached[1]
            end, job_end = hit.start + duration, hit.start + expected
            return hit.start, [
                (
                    self.nodes[n],
                    self.nodes[n].window(hit.start, end, cand.ignore, job_end, limits),
                )
                for n in hit.nodes
            ]
        if cached is not None and cached[0] == self.profile_version:
            return None
        result = self._search(req, shape, cand, duration, expected, limits)
        if result is None:
            self.forecast_cache[key] = (self.profile_version, None)
        else:
            names = tuple(n.name for n, _ in result[1])
            self.forecast_cache[key] = (
                self.profile_version,
                Forecast(req.job_id, result[0], cand.partition.name, names, False),
            )
        return result

    def _search(
        self,
        req: JobRequest,
        shape: Shape,
        cand: Candidate,
        duration: float,
        expected: float,
        limits: bool = False,
    ) -> tuple[float, list[tuple[NodeProfile, Avail]]] | None:
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

        def check(nodes: Iterable[NodeProfile], t: float) -> None:
            for node in nodes:
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
            chosen = self.choose(list(fitting.values()), shape, cand, t, t + expected)
            if chosen is not None:
                return t, chosen
        return None
