"""The site's jobs made ready for a replay: each stored job back in the queue as it was
submitted, with what really happened to it beside it.

What a replayed job does once started is what it really did: its runs last as long as
its real runs did (a run ended by a node failure, an operator's requeue or a stall is
replayed as such, ending after as long; a run a preemption ended is not: the replay
preempts by itself, or not), and it ends in its real final state (COMPLETED, FAILED,
TIMEOUT... which a dependency reads). A job cancelled before it ever started leaves the
queue at its cancel time; one still running when the store was read runs until then
at least; one still pending then, for its time limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from corral.errors import CorralError
from corral.jobspec import dependencies
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.sched import Placement
from ctld.sim.history import History

INF = float("inf")

# the (start, end) of each job a dependency names (an array's id: each of its tasks)
Times = Callable[[int], list[tuple[float, float]]]


@dataclass
class Real:
    """What the store says happened to a job."""

    start: float  # its first start (0: it never started)
    end: float  # its end (0: not ended when read)
    state: int
    partition: str
    gpus: float  # GPUs it held (shards as fractions of a GPU)
    preempted: int  # runs a preemption ended
    eligible: float  # when it could first start (submit, --begin, dependencies, holds)
    placements: tuple[Placement, ...] = ()  # where its last run ran
    runs: tuple[tuple[float, float], ...] = ()  # (start, end) of each run (end 0: running)


@dataclass
class ReplayJob:
    job: pb.Job  # the replay's own copy: pending, as submitted
    runs_s: list[float]  # each run's length, the last one the run that ended it
    final_state: int
    withdraw_at: float = INF  # cancelled while pending: leaves the queue then
    holds: list[tuple[float, float]] = field(default_factory=list)
    counted: bool = True  # submitted in the window (carried-over jobs are not counted)
    censored: bool = False  # its real run was not over when the store was read
    real: Real | None = None


def gpus_of(job: pb.Job, shards_per_gpu: dict[str, int]) -> float:
    """The GPUs a job held: whole GPUs, plus shards as their fraction of a GPU."""
    total = 0.0
    for a in job.allocations:
        if a.shards:
            total += a.shards / max(shards_per_gpu.get(a.node, 1), 1)
        else:
            total += len(a.gpu_indices)
    return total


def replay_jobs(history: History, shards_per_gpu: dict[str, int]) -> list[ReplayJob]:
    """Every job of ``history`` ready to replay, in submit order."""
    times: dict[int, list[tuple[float, float]]] = {}
    for stored in (*history.before, *history.jobs):
        first = min(
            (r.start_time for r in history.earlier_runs.get(stored.job_id, []) if r.start_time > 0),
            default=stored.start_time,
        )
        pair = (first or stored.start_time, stored.end_time)
        times[stored.job_id] = [pair]
        if stored.array_job_id and stored.array_job_id != stored.job_id:
            times.setdefault(stored.array_job_id, []).append(pair)
    out = []
    for stored in history.jobs:
        earlier = history.earlier_runs.get(stored.job_id, [])
        out.append(_replay_job(stored, earlier, history, shards_per_gpu))
    for rj in out:
        assert rj.real is not None
        rj.real.eligible = eligible_at(rj, rj.real.start, lambda i: times.get(i, []))
    return out


def _replay_job(
    stored: pb.Job, earlier: list[pb.Job], history: History, shards_per_gpu: dict[str, int]
) -> ReplayJob:
    causes = [i.cause for i in stored.interruptions]
    runs: list[float] = []
    preempted = 0
    for i, run in enumerate(earlier):
        cause = causes[i] if i < len(causes) else ""
        if cause == "preemption":
            preempted += 1
        elif run.start_time > 0 and run.end_time >= run.start_time:
            runs.append(run.end_time - run.start_time)
    first_start = min(
        [r.start_time for r in earlier if r.start_time > 0]
        + ([stored.start_time] if stored.start_time > 0 else []),
        default=0.0,
    )
    limit = float(stored.time_limit_s) if stored.time_limit_s > 0 else INF
    censored = False
    withdraw = INF
    state = int(stored.state)
    if stored.start_time > 0 and stored.end_time >= stored.start_time > 0:
        runs.append(stored.end_time - stored.start_time)
    elif stored.start_time > 0:  # still running when read
        runs.append(max(history.read_at - stored.start_time, 0.0))
        censored, state = True, pb.JOB_STATE_COMPLETED
    elif state in js.FINISHED:  # ended without a run of its own: cancelled pending
        withdraw = stored.end_time or stored.submit_time
        runs.append(limit)
    else:  # still pending when read
        runs.append(limit)
        censored, state = True, pb.JOB_STATE_COMPLETED
    job = pb.Job()
    job.CopyFrom(stored)
    reset(job)
    counted = history.start <= stored.submit_time < history.end
    real = Real(
        start=first_start,
        end=stored.end_time,
        state=int(stored.state),
        partition=stored.partition,
        gpus=gpus_of(stored, shards_per_gpu),
        preempted=preempted,
        eligible=0.0,
        placements=tuple(
            Placement(a.node, a.cpus, a.mem_mb, tuple(a.gpu_indices), a.shards)
            for a in stored.allocations
        ),
        runs=tuple((r.start_time, r.end_time) for r in (*earlier, stored) if r.start_time > 0),
    )
    return ReplayJob(
        job,
        runs,
        state,
        withdraw,
        history.holds.get(stored.job_id, []),
        counted,
        censored,
        real,
    )


def reset(job: pb.Job) -> None:
    """``job`` as it stood at its submit: pending, never run, nothing held for it."""
    job.state = pb.JOB_STATE_PENDING
    job.start_time = job.end_time = 0.0
    job.first_start_time = 0.0
    job.eligible_time = max(job.submit_time, job.spec.begin_time)
    job.restart_count = 0
    job.hold = pb.HOLD_NONE
    job.reason = ""
    job.priority = 0
    for name in ("allocations", "interruptions", "steps", "events", "waits_for"):
        job.ClearField(name)
    job.nodelist = job.batch_host = ""
    job.expected_start = 0.0


def eligible_at(rj: ReplayJob, started: float, times: Times) -> float:
    """When the job could first start: its submit or --begin time, its dependencies'
    being met (by ``times``: the real records, or a replay's), the end of a hold before
    it ``started``."""
    job = rj.job
    at = max(job.submit_time, job.spec.begin_time, dependency_met(job, times))
    for _since, until in rj.holds:
        if until <= (started or INF):
            at = max(at, until)
    return at


def dependency_met(job: pb.Job, times: Times) -> float:
    """When ``job``'s --dependency was met: the latest condition of a ``,`` list, the
    earliest of a ``?`` one (after: the job's start + its delay; the others: its end);
    0 for none, or one never met (the job's other times then count)."""
    try:
        typed = dependencies(job.spec)
    except CorralError:
        return 0.0
    if typed is None:
        return 0.0
    met_at = []
    for cond in typed.conditions:
        if cond.kind == "singleton":
            continue
        met = []
        for ref in cond.jobs:
            for start, end in times(ref.job_id):
                if cond.kind == "after":
                    met.append((start or end) + ref.delay_min * 60)
                elif end > 0:
                    met.append(end)
        if met:
            met_at.append(max(met))
    if not met_at:
        return 0.0
    return min(met_at) if typed.any_of else max(met_at)
