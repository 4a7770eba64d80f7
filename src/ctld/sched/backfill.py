"""The pass: start what can start, reserve for the top blocked jobs, backfill the rest.

Pending jobs are taken highest priority first. Each one starts now if it fits on its
partition's nodes for its whole time limit without touching any reservation; if not,
the first ``reserve_depth`` such jobs get a reservation at the earliest time they fit
(EASY backfill when that is 1), which every later job must leave intact, and the next
``forecast_depth`` get an expected start without one. Jobs with no time limit are
treated as running forever. Everything is a function of the snapshot alone, so a plan
is reproducible and the simulator runs the very same code.

This module is the pass's order (priority, the starvation guard, shortest-first
backfill, classes of like jobs); its parts are pass_state.py (what the pass knows),
placing.py (fitting now), preempting.py and forecasting.py (reasons, reservations).
"""

from __future__ import annotations

import dataclasses

from ctld.sched import preempt
from ctld.sched.forecasting import Forecasting
from ctld.sched.model import INFINITY, JobRequest, Plan, Snapshot
from ctld.sched.pass_state import (
    PARTITION_DOWN,
    PARTITION_NODE_LIMIT,
    PARTITION_TIME_LIMIT,
    PRIORITY,
    QOS_MAX_JOBS_PER_USER,
    REQ_NODE_NOT_AVAIL,
    RESERVATION,
    RESOURCES,
    UNAVAILABLE_NODES,
    Candidate,
    Prepared,
)
from ctld.sched.preempting import Preempting
from ctld.sched.shape import Shape, job_shape

# the reasons are the one enum's (corral/reasons.py), named here as the core's
__all__ = [
    "MAX_PREEMPT_SEARCHES",
    "PARTITION_DOWN",
    "PARTITION_NODE_LIMIT",
    "PARTITION_TIME_LIMIT",
    "PRIORITY",
    "QOS_MAX_JOBS_PER_USER",
    "REQ_NODE_NOT_AVAIL",
    "RESERVATION",
    "RESOURCES",
    "UNAVAILABLE_NODES",
    "schedule",
    "starving_first",
]

# preemption searches per pass (each looks at every node of its partitions): a deep
# queue of preemptors is served over several passes, not in one long one that would
# hold up ctld's loop
MAX_PREEMPT_SEARCHES = 50


class _Pass(Forecasting, Preempting):
    def __init__(self, snap: Snapshot) -> None:
        super().__init__(snap)
        self.max_preempt_searches = MAX_PREEMPT_SEARCHES

    # ------------------------------------------------------------ the pass

    def run(self) -> Plan:
        considered = 0
        pending = self.snap.pending
        if self.settings.starve_after_s > 0:
            pending, self.starving = starving_first(
                pending, self.now - self.settings.starve_after_s
            )
        shortest = self.settings.backfill_order == "shortest" and self.settings.backfill
        for i, req in enumerate(pending):
            if shortest and self.reserved >= self.settings.reserve_depth:
                # the reserved jobs are placed: everything behind them is a backfill
                # candidate, tried shortest predicted run first (EASY-SJBF)
                self.backfill_shortest_first(pending[i:])
                considered = len(pending)
                break
            considered += 1
            if req.blocked_reason:
                self.reasons[req.job_id] = req.blocked_reason
                continue
            self.consider(req)
        return Plan(
            snapshot_version=self.snap.version,
            starts=tuple(self.starts),
            reasons=self.reasons,
            forecasts=self.forecasts,
            considered=considered,
            preemptions=tuple(self.preemptions),
        )

    def backfill_shortest_first(self, rest: tuple[JobRequest, ...]) -> None:
        expected_of: dict[int, float] = {}
        keys: list[float] = []
        for req in rest:
            expected = expected_of.get(req.klass)
            if expected is None:
                expected = expected_of[req.klass] = self.durations(req)[1]
            keys.append(expected)
        # a stable sort: equal predictions keep their priority order
        order = sorted(range(len(rest)), key=keys.__getitem__)
        # what blocked() needs for each job left waiting, by its place in priority order
        waiting: list[Prepared | None] = [None] * len(rest)
        for i in order:
            req = rest[i]
            if req.blocked_reason:
                self.reasons[req.job_id] = req.blocked_reason
                continue
            dead = None if self.own_way(req) else self.dead.get(req.klass)
            prepared = self.class_mate(req, dead) if dead is not None else self.tried(req)
            if prepared is not None and self.try_preempt(req, *prepared):
                prepared = None  # preempting for it, or waiting on its claim
            waiting[i] = prepared
        # reasons and forecasts for the ones left, in priority order again
        later_of, reasons, settings = self.later, self.reasons, self.settings
        self.stacking = settings.stack_forecasts > 0
        for i, prepared in enumerate(waiting):
            if prepared is None:
                continue
            req = rest[i]
            later = later_of.get(req.klass)
            if (
                later is not None
                and req.job_id not in self.starving
                and self.reserved >= settings.reserve_depth
                and self.forecasted >= settings.forecast_depth
            ):
                reasons[req.job_id] = later  # blocked()'s own shortcut, without the call
                continue
            self.blocked(req, *prepared)

    def tried(self, req: JobRequest) -> Prepared | None:
        """Try ``req`` in full: start it, or return what blocked() needs (None: its
        reason is set, or it is past ``max_job_test`` and left out of the plan)."""
        if self.max_tests and self.tests >= self.max_tests:
            return None
        prepared = self.prepare(req)
        if prepared is None:
            self.tests += 1
            self.dead[req.klass] = (self.reasons[req.job_id], None, job_shape(req))
            return None
        if self.try_start(req, *prepared):
            return None  # a start is no try: the limit bounds fruitless work only
        self.tests += 1
        if req.job_id not in self.claims:  # a claim's candidates are its owner's alone
            self.dead[req.klass] = ("", prepared, prepared[0])
        return prepared

    def own_way(self, req: JobRequest) -> bool:
        """A job never treated as its class's mate: a starving one, or one with a claim
        (resources kept for it alone)."""
        return req.job_id in self.starving or req.job_id in self.claims

    def class_mate(
        self, req: JobRequest, dead: tuple[str, Prepared | None, Shape]
    ) -> Prepared | None:
        """``req``'s class found no start in this pass, so neither does ``req`` (a pass
        only takes resources away, and limits only fill): prepare's checks in its
        order, without the search. Returns what blocked() needs, or None with the
        reason set. (A starving job is never a class-mate: it is planned its own way.)"""
        limit = self.qos_limits.get(req.qos, 0)
        if limit and self.user_jobs.get((req.qos, req.user), 0) >= limit:
            self.reasons[req.job_id] = QOS_MAX_JOBS_PER_USER
            return None
        reason, prepared, shape = dead
        over = self.limits.blocked(req, shape)
        if over:
            self.reasons[req.job_id] = over
            return None
        if prepared is None:
            self.reasons[req.job_id] = reason
            return None
        if self.fcfs_blocked:
            self.reasons[req.job_id] = PRIORITY
            return None
        return prepared

    def durations(self, req: JobRequest) -> tuple[float, float]:
        """(its limit, what the plan expects it to run): the prediction when planning
        with predictions, never more than the limit."""
        duration = INFINITY if req.time_limit_s < 0 else float(max(req.time_limit_s, 1))
        if self.predict and req.predicted_s > 0:
            return duration, min(float(req.predicted_s), duration)
        return duration, duration

    def prepare(self, req: JobRequest) -> Prepared | None:
        """Its shape, candidate partitions and durations; None (reason set) if it has none."""
        limit = self.qos_limits.get(req.qos, 0)
        if limit and self.user_jobs.get((req.qos, req.user), 0) >= limit:
            self.reasons[req.job_id] = QOS_MAX_JOBS_PER_USER
            return None
        shape = job_shape(req)
        over = self.limits.blocked(req, shape)
        if over:  # an accounting limit: it waits without holding anything back for it
            self.reasons[req.job_id] = over
            return None
        duration, expected = self.durations(req)
        candidates: list[Candidate] = []
        reason: str = RESOURCES
        for part_name in req.partitions:
            cand_or_reason = self.candidate(req, shape, part_name)
            if isinstance(cand_or_reason, str):
                reason = cand_or_reason
                continue
            candidates.append(cand_or_reason)
        if not candidates:
            self.reasons[req.job_id] = reason
            return None
        if self.fcfs_blocked:
            self.reasons[req.job_id] = PRIORITY
            return None
        if req.job_id in self.claims:  # what was freed for it is its own
            owner = preempt.claim_owner(req.job_id)
            candidates = [dataclasses.replace(c, ignore=owner) for c in candidates]
        return shape, candidates, duration, expected

    def try_start(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[Candidate],
        duration: float,
        expected: float,
    ) -> bool:
        for cand in candidates:
            if self.now < cand.not_before:
                continue
            chosen = self.fit_now(req, shape, cand, duration, expected)
            if chosen is not None:
                # whether it fits only by its prediction (not to its limit)
                relied = expected < duration and any(
                    node.holds
                    and not node.fits(
                        node.window(self.now, self.now + duration, cand.ignore, shared=True),
                        shape,
                        req.exclusive,
                    )
                    for node, _ in chosen
                )
                self.start(req, shape, cand, chosen, expected, duration, relied)
                return True
        return False

    def consider(self, req: JobRequest) -> None:
        dead = None if self.own_way(req) else self.dead.get(req.klass)
        prepared = self.class_mate(req, dead) if dead is not None else self.tried(req)
        if prepared is not None and not self.try_preempt(req, *prepared):
            self.blocked(req, *prepared)


def starving_first(
    pending: tuple[JobRequest, ...], cutoff: float
) -> tuple[tuple[JobRequest, ...], frozenset[int]]:
    """The queue with the longest waiter moved to its front if it has been eligible
    since ``cutoff`` or earlier, and its id: the starvation guard. Priority (fair-share
    above all) and shortest-first backfill may pass a job over for days; past the
    threshold the oldest job gets the reservation as FCFS would give it, kept against
    the limits of the jobs backfilled around it. The others keep their order (moving
    them all ahead cost more slowdown for no shorter longest wait)."""
    oldest = min(
        (r for r in pending if not r.blocked_reason),
        key=lambda r: (r.eligible_time or r.submit_time, r.job_id),
        default=None,
    )
    if oldest is None or (oldest.eligible_time or oldest.submit_time) > cutoff:
        return pending, frozenset()
    return (oldest, *(r for r in pending if r is not oldest)), frozenset((oldest.job_id,))


def schedule(snapshot: Snapshot) -> Plan:
    """The plan for ``snapshot``: what starts now, and what every blocked job waits for."""
    return _Pass(snapshot).run()
