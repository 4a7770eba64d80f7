"""A discrete-event replay of a trace through ``ctld.sched.schedule``.

The machine is one pool of ``procs`` CPUs (a single node: the traces count processors,
not placements), each job asks for its processors for its user estimate, and really
ends at min(run, estimate), killed at its limit as in Tsafrir et al. After each batch
of events at one instant the core makes one pass and its starts are applied. The
expected start the core first gives each job is kept, to measure forecast error.
"""

from __future__ import annotations

import bisect
import heapq
import time
from dataclasses import dataclass, field

from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
    schedule,
)
from ctld.sched.priority import Weights, factors
from ctld.sim.swf import TraceJob

POLICIES: dict[str, Settings] = {
    "fcfs": Settings(backfill=False, reserve_depth=0, forecast_depth=0),
    "easy": Settings(reserve_depth=1, forecast_depth=50),
    "conservative": Settings(reserve_depth=100_000, forecast_depth=0),
    "corral": Settings(reserve_depth=1, forecast_depth=50, placement="pack"),
}
# corral's default: age and job size (small first), no fair-share in a replay
CORRAL_WEIGHTS = Weights(
    age=1000, fairshare=0, job_size=1000, partition=0, qos=0, max_age_s=86400, favor_small=True
)


@dataclass
class Outcome:
    job: TraceJob
    start: float
    end: float
    first_forecast: float = 0.0
    corrected_forecast: float = 0.0  # scaled by how much of their limits jobs really used


@dataclass
class Result:
    outcomes: list[Outcome] = field(default_factory=list)
    pass_times: list[float] = field(default_factory=list)
    procs: int = 0


def replay(jobs: tuple[TraceJob, ...], procs: int, policy: str) -> Result:
    settings = POLICIES[policy]
    result = Result(procs=procs)
    part = (PartitionView("p", ("m",)),)
    by_id = {j.job_id: j for j in jobs}
    forecasts: dict[int, float] = {}
    corrected: dict[int, float] = {}
    ratios: list[float] = []  # run / estimate of finished jobs, kept sorted
    pending: dict[int, TraceJob] = {}
    running: dict[int, tuple[float, int]] = {}  # job -> (limit end, procs)
    ends: list[tuple[float, int]] = []
    starts: dict[int, float] = {}
    free = procs
    i = 0
    while i < len(jobs) or ends:
        now = min(
            jobs[i].submit if i < len(jobs) else float("inf"), ends[0][0] if ends else float("inf")
        )
        while ends and ends[0][0] <= now:
            _, jid = heapq.heappop(ends)
            free += running.pop(jid)[1]
            job = by_id[jid]
            bisect.insort(ratios, min(job.run / job.estimate, 1.0))
            result.outcomes.append(
                Outcome(job, starts[jid], now, forecasts.get(jid, 0.0), corrected.get(jid, 0.0))
            )
        while i < len(jobs) and jobs[i].submit <= now:
            if jobs[i].procs <= procs:
                pending[jobs[i].job_id] = jobs[i]
            i += 1
        if not pending:
            continue
        reqs = [
            JobRequest(
                j.job_id,
                ("p",),
                ntasks=j.procs,
                time_limit_s=int(j.estimate),
                priority=_priority(j, now, procs) if policy == "corral" else 0,
                submit_time=j.submit,
            )
            for j in pending.values()
        ]
        reqs.sort(key=lambda r: (-r.priority, r.submit_time, r.job_id))
        snap = Snapshot(
            1,
            now,
            (NodeView("m", procs, 0, 0, free, 0, (), idle=free == procs),),
            part,
            tuple(reqs),
            tuple(
                RunningView(jid, end, (Placement("m", n, 0, ()),))
                for jid, (end, n) in running.items()
            ),
            (),
            settings,
        )
        began = time.perf_counter()
        plan = schedule(snap)
        result.pass_times.append(time.perf_counter() - began)
        median = ratios[len(ratios) // 2] if ratios else 1.0
        for jid, f in plan.forecasts.items():
            if jid not in forecasts:
                forecasts[jid] = f.start
                corrected[jid] = now + (f.start - now) * median
        for st in plan.starts:
            job = pending.pop(st.job_id)
            n = sum(p.cpus for p in st.placements)
            free -= n
            starts[job.job_id] = now
            forecasts.setdefault(job.job_id, now)
            corrected.setdefault(job.job_id, now)
            running[job.job_id] = (now + job.estimate, n)
            heapq.heappush(ends, (now + min(job.run, job.estimate), job.job_id))
    return result


def _priority(job: TraceJob, now: float, procs: int) -> int:
    f = factors(
        CORRAL_WEIGHTS,
        age_s=now - job.submit,
        fairshare=0.0,
        cpus=job.procs,
        cluster_cpus=procs,
        partition_tier=0,
        max_partition_tier=0,
        qos_priority=0,
        max_qos_priority=0,
        nice=0,
    )
    return f.priority
