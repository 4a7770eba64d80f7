"""A discrete-event replay of a trace through ``ctld.sched.schedule``.

The machine is one pool of ``procs`` CPUs (a single node: the traces count processors,
not placements), each job asks for its processors for its user estimate, and really
ends at min(run, estimate), killed at its limit as in Tsafrir et al. After each batch
of events at one instant the core makes one pass and its starts are applied. The
expected start the core first gives each job is kept, to measure forecast error.

Policy ``corral`` is what ctld runs with its default configuration: the scheduler
settings and priority weights are read from ``corral.config``'s defaults, run times are
predicted by the same ``RunTimePredictor`` ctld feeds, and fair-share is on, with every
trace user given one share under root (what ctld does when no ``[[accounts]]`` are
configured) and usage decayed with the configured half-life.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace

from corral.config import PriorityConfig, SchedulerConfig
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    RunningView,
    Settings,
    Snapshot,
    Start,
    schedule,
)
from ctld.sched.fairshare import AccountShare, share_rows
from ctld.sched.predict import RunTimePredictor
from ctld.sched.priority import Weights, factors
from ctld.sched.quick import (
    MAX_CLASSES,
    priority_order,
    quick_queue,
    quick_starts,
    reserved_jobs,
    waiting_firsts,
)
from ctld.sim.power import PowerPool, PowerSettings
from ctld.sim.swf import TraceJob

RECALC_S = 30.0  # ctld recomputes the queue's priorities at most this often
FORECAST_DEPTH = 50  # the replays' forecast depth (ctld's default is 100: cost)


@dataclass(frozen=True)
class Policy:
    settings: Settings
    weights: Weights | None = None  # None: first come, first served
    fairshare: bool = False
    half_life_s: float = 7 * 86400.0


def ctld_default() -> Policy:
    """The policy ctld runs when its config says nothing: read off corral.config."""
    sc, pc = SchedulerConfig(), PriorityConfig()
    settings = Settings(
        backfill=sc.backfill,
        reserve_depth=sc.reserve_depth,
        forecast_depth=FORECAST_DEPTH,
        stack_forecasts=sc.stack_forecasts,
        placement=sc.placement,
        predict=sc.predict,
        backfill_order=sc.backfill_order,
        max_job_test=sc.max_job_test,
        starve_after_s=sc.starvation_guard_s,
    )
    weights = Weights(
        age=pc.weight_age,
        fairshare=pc.weight_fairshare,
        job_size=pc.weight_job_size,
        partition=0,  # one partition: a constant
        qos=0,
        max_age_s=pc.max_age_s,
        favor_small=pc.favor_small,
    )
    return Policy(
        settings, weights, fairshare=pc.weight_fairshare > 0, half_life_s=pc.decay_half_life_s
    )


def _policies() -> dict[str, Policy]:
    easy = Settings(reserve_depth=1, forecast_depth=FORECAST_DEPTH)
    corral = ctld_default()
    return {
        "fcfs": Policy(Settings(backfill=False, reserve_depth=0, forecast_depth=0)),
        "easy": Policy(easy),
        "conservative": Policy(Settings(reserve_depth=100_000, forecast_depth=0)),
        # EASY-SJBF: backfill candidates shortest limit first
        "easy-sjbf": Policy(replace(easy, backfill_order="shortest")),
        # EASY++ (Tsafrir et al.): predictions, their correction, shortest-predicted-first
        "easy++": Policy(replace(easy, predict=True, backfill_order="shortest")),
        "corral": corral,
        # ctld's default with scheduler.predict = false: backfill by limits only
        "corral-limits": replace(corral, settings=replace(corral.settings, predict=False)),
        # ctld's default with stacked forecasts (scheduler.stack_forecasts = 16, opt-in)
        "corral-stacked": replace(corral, settings=replace(corral.settings, stack_forecasts=16)),
    }


POLICIES: dict[str, Policy] = _policies()


@dataclass
class Outcome:
    job: TraceJob
    start: float
    end: float
    first_forecast: float = 0.0
    # the first forecast with a correction learned from past forecasts (see Corrector)
    corrected_forecast: float = 0.0
    forecast_at: float = 0.0  # when the first forecast was made
    forecast_position: int = -1  # its place among that pass's forecasts (0: reserved)
    predicted_s: int = 0  # its predicted run time


@dataclass
class TopJobDelay:
    """A job reserved at the top of the queue while jobs backfilled on predictions."""

    job_id: int
    reserved_start: float  # its reservation when the first such job was started
    start: float  # when it really started
    overran: bool  # a job backfilled on its prediction still ran at the reserved start

    @property
    def delay(self) -> float:
        return max(0.0, self.start - self.reserved_start) if self.overran else 0.0


@dataclass
class Result:
    outcomes: list[Outcome] = field(default_factory=list)
    pass_times: list[float] = field(default_factory=list)
    procs: int = 0
    top_jobs: int = 0  # jobs that held the reservation at some pass
    top_delays: list[TopJobDelay] = field(default_factory=list)
    quick_starts: int = 0  # jobs started at submit, without a pass (sched/quick.py)
    quick_times: list[float] = field(default_factory=list)
    power: PowerPool | None = None  # power saving's figures (sim/power.py)


class _Fairshare:
    """Decayed usage per user and the classic fair-share factor, as ctld computes it."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life = half_life_s
        self.value: dict[str, float] = {}
        self.as_of: dict[str, float] = {}
        self.factor: dict[str, float] = {}

    def add(self, user: str, amount: float, at: float) -> None:
        old = self.value.get(user, 0.0)
        if old:
            old *= math.pow(0.5, max(at - self.as_of[user], 0.0) / self.half_life)
        self.value[user] = old + amount
        self.as_of[user] = at

    def refresh(self, now: float, users: set[str], running: list[tuple[str, float]]) -> None:
        usage = {
            ("root", u): v * math.pow(0.5, max(now - self.as_of[u], 0.0) / self.half_life)
            for u, v in self.value.items()
        }
        for user, used in running:
            usage[("root", user)] = usage.get(("root", user), 0.0) + used
        everyone = users | {u for _a, u in usage}
        tree = [AccountShare("root", "", 1, tuple((u, 1) for u in sorted(everyone)))]
        self.factor = {r.user: r.fairshare for r in share_rows(tree, usage) if r.user}


class Corrector:
    """A correction of forecasts learned from history (an experiment, not in ctld).

    For each past job, the ratio of its real wait to its first forecast's wait (both
    from the pass that made the forecast), kept per queue position (log2 buckets of its
    place among the forecasts: the reserved job, 2nd, 3rd-4th, 5th-8th, ...), the last
    ``keep`` of each. A new forecast's wait is scaled by its bucket's median ratio: the
    median minimizes absolute error, and a deep place in the queue is overtaken more.
    """

    def __init__(self, keep: int = 500, floor_s: float = 60.0) -> None:
        self.keep, self.floor = keep, floor_s
        self.ratios: dict[int, list[float]] = {}  # bucket -> recent ratios, in order
        self.made: dict[int, tuple[float, float, int]] = {}  # job -> (at, wait, bucket)

    def correct(self, job_id: int, now: float, start: float, position: int) -> float:
        bucket = position.bit_length()
        wait = max(start - now, self.floor)
        self.made[job_id] = (now, wait, bucket)
        past = self.ratios.get(bucket)
        if not past:
            return start
        ordered = sorted(past)
        return now + max(start - now, 0.0) * ordered[len(ordered) // 2]

    def started(self, job_id: int, now: float) -> None:
        made = self.made.pop(job_id, None)
        if made is None:
            return
        at, wait, bucket = made
        past = self.ratios.setdefault(bucket, [])
        past.append((now - at) / wait)
        if len(past) > self.keep:
            del past[0]


def replay(
    jobs: tuple[TraceJob, ...],
    procs: int,
    policy: str | Policy,
    *,
    quick: bool = True,
    power: PowerSettings | None = None,
) -> Result:
    """``quick``: new jobs are decided at submit as ctld does (its ``start_on_submit``);
    ``power``: each processor a node that power saving powers down (sim/power.py)."""
    pol = POLICIES[policy] if isinstance(policy, str) else policy
    settings = pol.settings
    result = Result(procs=procs)
    pool = result.power = PowerPool(procs, power) if power is not None else None
    if pool is not None and jobs:
        pool.start(jobs[0].submit)
    part = (PartitionView("p", ("m",)),)
    by_id = {j.job_id: j for j in jobs}
    forecasts: dict[int, float] = {}
    corrected: dict[int, float] = {}
    made: dict[int, tuple[float, int]] = {}  # job -> (when, position) of its first forecast
    corrector = Corrector()
    predictor = RunTimePredictor()
    predicted: dict[int, int] = {}  # made when the job enters the queue, as ctld does
    share = _Fairshare(pol.half_life_s)
    last_recalc = -math.inf
    prio: dict[int, int] = {}
    pending: dict[int, TraceJob] = {}
    running: dict[int, tuple[float, int]] = {}  # job -> (limit end, procs)
    ends: list[tuple[float, int]] = []
    starts: dict[int, float] = {}
    # top-of-queue jobs -> (their reservation when jobs were first backfilled in front
    # of them on predictions, those jobs)
    watched: dict[int, tuple[float, set[int]]] = {}
    ever_top: set[int] = set()
    free = procs
    # the jobs the last pass reserved for (None: something other than a submit happened
    # since, so new jobs wait for a pass), as ctld keeps them
    last_reserved: tuple[int, ...] | None = None
    last_queue: tuple[JobRequest, ...] = ()  # that pass's queue, in priority order
    last_plan = Plan(snapshot_version=0)

    def request(j: TraceJob) -> JobRequest:
        return JobRequest(
            j.job_id,
            ("p",),
            ntasks=j.procs,
            time_limit_s=int(j.estimate),
            priority=prio.get(j.job_id, 0),
            submit_time=j.submit,
            user=str(j.user),
            predicted_s=predicted[j.job_id],
        )

    def snapshot(queue: tuple[JobRequest, ...], now: float, free: int) -> Snapshot:
        on = free if pool is None else pool.free_on  # the nodes powered down: busy
        return Snapshot(
            1,
            now,
            (NodeView("m", procs, 0, 0, on, 0, (), idle=on == procs),),
            part,
            queue,
            tuple(
                RunningView(
                    jid,
                    end,
                    (Placement("m", n, 0, ()),),
                    start_time=starts[jid],
                    predicted_s=predicted[jid],
                )
                for jid, (end, n) in running.items()
            )
            + (pool.views(now) if pool is not None else ()),
            (),
            settings,
        )

    def start(st: Start, now: float) -> int:
        """Start what ``st`` starts; the processors it takes."""
        job = pending.pop(st.job_id)
        n = sum(p.cpus for p in st.placements)
        if pool is not None:
            pool.take(n)
        starts[job.job_id] = now
        corrector.started(job.job_id, now)
        forecasts.setdefault(job.job_id, now)
        corrected.setdefault(job.job_id, now)
        running[job.job_id] = (now + job.estimate, n)
        heapq.heappush(ends, (now + min(job.run, job.estimate), job.job_id))
        held = watched.pop(job.job_id, None)
        if held is not None:
            reserved_at, backfilled = held
            overran = any(
                starts[b] + min(by_id[b].run, by_id[b].estimate) > reserved_at for b in backfilled
            )
            result.top_delays.append(TopJobDelay(job.job_id, reserved_at, now, overran))
        return n

    i = 0
    # (with power saving, a job may wait for nothing but a boot: the pool's next event)
    while i < len(jobs) or ends or (pool and pending and pool.next_event() < math.inf):
        now = min(jobs[i].submit if i < len(jobs) else math.inf, ends[0][0] if ends else math.inf)
        if pool is not None:
            now = min(now, pool.next_event())
            pool.advance(now)
        ended = False
        arrived: list[int] = []
        while ends and ends[0][0] <= now:
            ended = True
            _, jid = heapq.heappop(ends)
            n_ended = running.pop(jid)[1]
            free += n_ended
            if pool is not None:
                pool.release(n_ended, now)
            job = by_id[jid]
            elapsed = now - starts[jid]
            predictor.observe(str(job.user), elapsed, int(job.estimate))
            if pol.fairshare:
                share.add(str(job.user), elapsed * job.procs, now)
            at, position = made.get(jid, (starts[jid], -1))
            result.outcomes.append(
                Outcome(
                    job,
                    starts[jid],
                    now,
                    forecasts.get(jid, 0.0),
                    corrected.get(jid, 0.0),
                    at,
                    position,
                    predicted.pop(jid, 0),
                )
            )
        while i < len(jobs) and jobs[i].submit <= now:
            job = jobs[i]
            if job.procs <= procs:
                pending[job.job_id] = job
                arrived.append(job.job_id)
                predicted[job.job_id] = predictor.predict(str(job.user), int(job.estimate))
                if pol.weights is not None:
                    prio[job.job_id] = _priority(pol.weights, job, now, procs, share.factor)
            i += 1
        if not pending:
            continue
        if pol.weights is not None and now - last_recalc >= RECALC_S:
            last_recalc = now
            last_reserved = None  # a recalculation is part of a pass: one runs now
            if pol.fairshare:
                share.refresh(
                    now,
                    {str(j.user) for j in pending.values()},
                    [
                        (str(by_id[jid].user), (now - starts[jid]) * n)
                        for jid, (_e, n) in running.items()
                    ],
                )
            for jid, job in pending.items():
                prio[jid] = _priority(pol.weights, job, now, procs, share.factor)
        if quick and last_reserved is not None and not ended and arrived:
            # ctld decides new jobs at submit when only submits came since its last
            # pass (sched/quick.py), and runs a pass only for those it did not start
            new = [j for j in arrived if j in pending]
            waiting = waiting_firsts(last_queue, last_plan, MAX_CLASSES)
            weighed = (*last_reserved, *(waiting or ()))
            quick_plan = None
            if waiting is not None and all(j in pending for j in weighed):
                began = time.perf_counter()
                queue = quick_queue(
                    [request(pending[j]) for j in dict.fromkeys(weighed)],
                    [request(pending[j]) for j in new],
                )
                quick_plan = quick_starts(snapshot(queue, now, free), new)
                result.quick_times.append(time.perf_counter() - began)
            for st in quick_plan or ():
                free -= start(st, now)
            if quick_plan is not None:
                result.quick_starts += len(quick_plan)
                if len(quick_plan) == len(new):
                    continue
        reqs = [request(j) for j in pending.values()]
        reqs.sort(key=priority_order)
        began = time.perf_counter()
        plan = schedule(snapshot(tuple(reqs), now, free))
        result.pass_times.append(time.perf_counter() - began)
        last_reserved, last_queue, last_plan = reserved_jobs(plan), tuple(reqs), plan
        for position, (jid, f) in enumerate(plan.forecasts.items()):
            if jid not in forecasts:
                forecasts[jid] = f.start
                made[jid] = (now, position)
                corrected[jid] = corrector.correct(jid, now, f.start, position)
        for st in plan.starts:
            free -= start(st, now)
        if pool is not None:
            pool.after_plan(plan, {f: by_id[f].procs for f in plan.forecasts}, now)
        on_prediction = {s.job_id for s in plan.starts if s.on_prediction}
        for f in plan.forecasts.values():
            if not f.reserved:
                continue
            ever_top.add(f.job_id)
            if on_prediction:
                held = watched.setdefault(f.job_id, (f.start, set()))
                held[1].update(on_prediction)
    result.top_jobs = len(ever_top)
    return result


def _priority(
    weights: Weights, job: TraceJob, now: float, procs: int, fairshare: dict[str, float]
) -> int:
    f = factors(
        weights,
        age_s=now - job.submit,
        fairshare=fairshare.get(str(job.user), 1.0),
        cpus=job.procs,
        cluster_cpus=procs,
        partition_tier=0,
        max_partition_tier=0,
        qos_priority=0,
        max_qos_priority=0,
        nice=0,
    )
    return f.priority
