"""The pass: start what can start, reserve for the top blocked jobs, backfill the rest.

Pending jobs are taken highest priority first. Each one starts now if it fits on its
partition's nodes for its whole time limit without touching any reservation; if not,
the first ``reserve_depth`` such jobs get a reservation at the earliest time they fit
(EASY backfill when that is 1), which every later job must leave intact, and the next
``forecast_depth`` get an expected start without one. Jobs with no time limit are
treated as running forever. Everything is a function of the snapshot alone, so a plan
is reproducible and the simulator runs the very same code.

This module is the pass's order (priority, the starvation guard, a requeued job's
claim first (reclaim.py), shortest-first backfill, classes of like jobs, the reason a
job left waiting gets, with reserved.py for advance reservations in its way). It
wires the parts, each with one job, and hands them a job with its ``Ask`` (ask.py):
``Availability`` (availability.py: the nodes over the pass, its one mutable picture of
them), ``Asks`` (ask.py: what a job asks, with ``Admission``, limits.py: whether the
limits let it run), ``Placer`` (placing.py: where it fits now), ``Preemptor``
(preempting.py: victims for it) and ``Forecaster`` (forecasting.py: when it fits later).
"""

from __future__ import annotations

import dataclasses

from ctld.sched import reclaim
from ctld.sched.ask import (
    PARTITION_DOWN,
    PARTITION_NODE_LIMIT,
    PARTITION_TIME_LIMIT,
    PRIORITY,
    QOS_MAX_JOBS_PER_USER,
    REQ_NODE_NOT_AVAIL,
    RESERVATION,
    RESOURCES,
    UNAVAILABLE_NODES,
    Ask,
    Asks,
)
from ctld.sched.availability import Availability
from ctld.sched.forecasting import Forecaster
from ctld.sched.limits import Admission
from ctld.sched.model import Forecast, JobRequest, Plan, Snapshot, Start
from ctld.sched.placing import Placer
from ctld.sched.preempting import Preemptor
from ctld.sched.reserved import Reserved
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

# what a class (JobRequest.klass) that found no start in this pass left its later
# class-mates: the reason its first job had no Ask, or that Ask (no room: the reason is
# decided by blocked()), and the class's shape
Verdict = tuple[str, Ask | None, Shape]


class _Pass:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.settings = snap.settings
        # requeued jobs claiming back their healthy nodes (reclaim.py): first in the pass
        claims = frozenset(c.job_id for c in snap.claims)
        self.reclaimers = reclaim.reclaiming(snap.pending, snap.now, claims)
        reclaiming = frozenset(r.job_id for r in self.reclaimers)
        avail = Availability(snap, self.reclaimers)
        self.admission = Admission(snap)
        self.placer = Placer(snap, avail)
        self.preemptor = Preemptor(snap, avail, MAX_PREEMPT_SEARCHES)
        self.claimed = self.preemptor.claimed  # jobs with resources kept for them alone
        self.asks = Asks(snap, avail, self.admission, self.claimed, reclaiming)
        # jobs planned their own way, never as a class-mate: a claim's candidates are
        # its owner's alone
        self.own_way = self.claimed | reclaiming
        self.forecaster = Forecaster(snap, avail, self.placer)
        self.reserved_nodes = Reserved(snap, avail)
        # the plan so far
        self.starts: list[Start] = []
        self.reasons: dict[int, str] = {}
        self.forecasts: dict[int, Forecast] = {}
        # the queue so far: reservations and forecasts given, partitions a blocked job
        # waits in (the jobs behind it wait for Priority), strict FCFS stopped
        self.reserved = 0
        self.forecasted = 0
        self.blocked_partitions: set[str] = set()
        self.fcfs_blocked = False
        self.starving: frozenset[int] = frozenset()  # past the starvation guard's threshold
        # classes that found no start in this pass, and the reason their later blocked
        # jobs get once no forecast is left to make
        self.dead: dict[int, Verdict] = {}
        self.later: dict[int, str] = {}
        self.tests = 0  # full tries that started nothing, against settings.max_job_test
        self.max_tests = snap.settings.max_job_test

    def run(self) -> Plan:
        considered = 0
        pending = self.snap.pending
        if self.settings.starve_after_s > 0:
            pending, self.starving = starving_first(
                pending, self.now - self.settings.starve_after_s
            )
        pending = reclaim.first(pending, self.reclaimers)
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
            ask = self.attempt(req)
            if ask is not None and not self.preempted(req, ask):
                self.blocked(req, ask)
        return Plan(
            snapshot_version=self.snap.version,
            starts=tuple(self.starts),
            reasons=self.reasons,
            forecasts=self.forecasts,
            considered=considered,
            preemptions=tuple(self.preemptor.preemptions),
        )

    def backfill_shortest_first(self, rest: tuple[JobRequest, ...]) -> None:
        expected_of: dict[int, float] = {}
        keys: list[float] = []
        for req in rest:
            expected = expected_of.get(req.klass)
            if expected is None:
                expected = expected_of[req.klass] = self.asks.durations(req)[1]
            keys.append(expected)
        # a stable sort: equal predictions keep their priority order
        order = sorted(range(len(rest)), key=keys.__getitem__)
        if self.settings.backfill_aged_s > 0:
            order = aged_first(rest, order, self.now - self.settings.backfill_aged_s)
        # what blocked() needs for each job left waiting, by its place in priority order
        waiting: list[Ask | None] = [None] * len(rest)
        for i in order:
            req = rest[i]
            if req.blocked_reason:
                self.reasons[req.job_id] = req.blocked_reason
                continue
            ask = self.attempt(req)
            if ask is not None and self.preempted(req, ask):
                ask = None  # preempting for it, or waiting on its claim
            waiting[i] = ask
        # reasons and forecasts for the ones left, in priority order again
        later_of, reasons, settings = self.later, self.reasons, self.settings
        self.forecaster.stacking = settings.stack_forecasts > 0
        for i, ask in enumerate(waiting):
            if ask is None:
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
            self.blocked(req, ask)

    def attempt(self, req: JobRequest) -> Ask | None:
        """Start ``req`` if it can; else its Ask, for preemption and blocked() (None:
        decided, its reason set, or past ``max_job_test`` and left out of the plan)."""
        own_way = req.job_id in self.starving or req.job_id in self.own_way
        dead = None if own_way else self.dead.get(req.klass)
        return self.class_mate(req, dead) if dead is not None else self.tried(req)

    def tried(self, req: JobRequest) -> Ask | None:
        """Try ``req`` in full (``attempt`` without its class's verdict)."""
        if self.max_tests and self.tests >= self.max_tests:
            return None
        if req.elastic and req.nodes_max > req.nodes_min and self.elastic_start(req):
            return None
        ask = self.asks.of(req)
        if not isinstance(ask, str) and self.fcfs_blocked:
            ask = PRIORITY  # strict FCFS: nothing passes the blocked job ahead
        if isinstance(ask, str):  # the reason it waits
            self.reasons[req.job_id] = ask
            self.tests += 1
            self.dead[req.klass] = (ask, None, job_shape(req))
            return None
        start = self.placer.start_now(req, ask)
        if start is not None:
            self.starts.append(start)
            self.admission.started(req, ask.shape)
            return None  # a start is no try: the limit bounds fruitless work only
        self.tests += 1
        if req.job_id not in self.own_way:  # a claim's candidates are its owner's alone
            self.dead[req.klass] = ("", ask, ask.shape)
        return ask

    def elastic_start(self, req: JobRequest) -> bool:
        """An elastic job (-N MIN-MAX --elastic) starts at the largest size above MIN
        that fits now; at MIN it is tried (and waits) as any job."""
        if self.fcfs_blocked:
            return False
        for nodes in range(req.nodes_max, req.nodes_min, -1):
            sized = dataclasses.replace(req, nodes_min=nodes)
            ask = self.asks.of(sized)
            if isinstance(ask, str):
                continue
            start = self.placer.start_now(sized, ask)
            if start is not None:
                self.starts.append(start)
                self.admission.started(sized, ask.shape)
                return True
        return False

    def class_mate(self, req: JobRequest, dead: Verdict) -> Ask | None:
        """``req``'s class found no start in this pass, so neither does ``req`` (a pass
        only takes resources away, and limits only fill): ``tried``'s checks in its
        order, without the search. (A starving job or one with a claim is never a
        class-mate: it is planned its own way.)"""
        reason, ask, shape = dead
        refused = self.admission.refusal(req, shape)
        if refused:
            self.reasons[req.job_id] = refused
            return None
        if ask is None:
            self.reasons[req.job_id] = reason
            return None
        if self.fcfs_blocked:
            self.reasons[req.job_id] = PRIORITY
            return None
        return ask

    def preempted(self, req: JobRequest, ask: Ask) -> bool:
        """Whether preemption takes care of ``req`` (it preempts, or waits on its claim)."""
        forecast = self.preemptor.preempt_for(req, ask)
        if forecast is None:
            return False
        self.reasons[req.job_id] = RESOURCES
        self.forecasts[req.job_id] = forecast
        return True

    def blocked(self, req: JobRequest, ask: Ask) -> None:
        """A job that cannot start now: its reason, and for the first ones a forecast
        (with a reservation for the first ``reserve_depth``)."""
        settings = self.settings
        later = self.later.get(req.klass)
        if (
            later is not None
            and req.job_id not in self.starving
            and self.reserved >= settings.reserve_depth
            and self.forecasted >= settings.forecast_depth
        ):
            self.reasons[req.job_id] = later  # what the rest below would decide
            return
        candidates = ask.candidates
        queued_behind = any(c.partition.name in self.blocked_partitions for c in candidates)
        waiting_for_resv = all(self.now < c.not_before for c in candidates)
        # others' advance reservations leave it too few nodes: Slurm names them first
        held_off = "" if waiting_for_resv else self.reserved_nodes.reason(req, ask)
        self.blocked_partitions.update(c.partition.name for c in candidates)
        if not settings.backfill:
            self.fcfs_blocked = True
        reserve = self.reserved < settings.reserve_depth
        if reserve or self.forecasted < settings.forecast_depth:
            guard = req.job_id in self.starving
            forecast = self.forecaster.earliest(req, ask, reserve, guard)
            if forecast is not None:
                self.forecasts[req.job_id] = forecast
                if reserve:
                    self.reserved += 1
                else:
                    self.forecasted += 1
        if waiting_for_resv:
            self.reasons[req.job_id] = RESERVATION
        elif held_off:
            self.reasons[req.job_id] = held_off
        elif queued_behind:
            self.reasons[req.job_id] = PRIORITY
        else:
            self.reasons[req.job_id] = RESOURCES
        # its class-mates queue behind it: their partitions are blocked from now on
        self.later[req.klass] = RESERVATION if waiting_for_resv else held_off or PRIORITY


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


def aged_first(rest: tuple[JobRequest, ...], order: list[int], cutoff: float) -> list[int]:
    """``order`` (indexes into ``rest``) with the jobs eligible since ``cutoff`` or
    earlier moved ahead, oldest first: shortest-first backfill passes an old job that
    could fit over for younger shorter ones, leaving it to wait for the head."""

    def since(i: int) -> float:
        return rest[i].eligible_time or rest[i].submit_time

    aged = sorted((i for i in order if since(i) <= cutoff), key=lambda i: (since(i), i))
    if not aged:
        return order
    taken = set(aged)
    return aged + [i for i in order if i not in taken]


def schedule(snapshot: Snapshot) -> Plan:
    """The plan for ``snapshot``: what starts now, and what every blocked job waits for."""
    return _Pass(snapshot).run()
