"""corral why: a pending job, explained against the very snapshot the scheduler uses.

Everything here is read off a plan or computed by running the same pure ``schedule``
on a copy of the snapshot with one thing changed (fewer GPUs, a shorter limit, another
partition), so a suggestion is never a guess. The plan assumes every running job runs
to its time limit, unless the scheduler plans with predicted run times
(``scheduler.predict``): then the plan already is the likely start, and a blocker's
likely end is its prediction. By limits only, the "likely" start corrects the plan with
how long recently finished jobs really ran against their limits.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from ctld.sched import INFINITY, JobRequest, Plan, Snapshot, schedule
from ctld.sched.model import Forecast
from ctld.sched.predict import expected_end


@dataclasses.dataclass(frozen=True)
class Blocker:
    job_id: int
    nodes: tuple[str, ...]
    expected_end: float
    likely_end: float


@dataclasses.dataclass(frozen=True)
class Alternative:
    change: str
    start: float  # 0: no forecast for it
    now: bool


@dataclasses.dataclass(frozen=True)
class Explanation:
    rank: int
    ahead: int
    reason: str
    forecast: Forecast | None
    blockers: tuple[Blocker, ...]
    alternatives: tuple[Alternative, ...]
    likely_start: float
    earliest_start: float
    history_ratio: float
    history_jobs: int


def history_ratios(samples: Sequence[tuple[float, float]]) -> list[float]:
    """elapsed / limit for finished jobs that had a limit, each clipped to [0, 1]."""
    return sorted(min(max(e / lim, 0.0), 1.0) for e, lim in samples if lim > 0 and e >= 0)


def explain(
    snap: Snapshot,
    job_id: int,
    ratios: Sequence[float],
    starts_of: Callable[[int], float],
    partitions_allowed: Sequence[str],
) -> Explanation | None:
    """Why ``job_id`` waits; None if the snapshot does not consider it (held, finished)."""
    req = next((r for r in snap.pending if r.job_id == job_id), None)
    if req is None:
        return None
    # every job gets its answer, however deep in a queue of distinct jobs
    snap = dataclasses.replace(snap, settings=dataclasses.replace(snap.settings, max_job_test=0))
    plan = schedule(snap)
    parts = set(req.partitions)
    queue = [r for r in snap.pending if parts & set(r.partitions)]
    rank = next(i for i, r in enumerate(queue) if r.job_id == job_id) + 1
    forecast = plan.forecasts.get(job_id)
    median = statistics.median(ratios) if ratios else 1.0
    quarter = ratios[len(ratios) // 4] if ratios else 1.0
    running = {r.job_id: r for r in snap.running}
    blockers = []
    for other in forecast.waits_for if forecast else ():
        run = running.get(other)
        if run is None:
            continue
        began = starts_of(other)
        limit = run.end_time - began
        if snap.settings.predict and run.predicted_s > 0:
            likely = expected_end(began, run.predicted_s, run.end_time, snap.now)
        elif run.end_time != INFINITY:
            likely = max(snap.now, began + median * limit)
        else:
            likely = INFINITY
        blockers.append(Blocker(other, tuple(p.node for p in run.placements), run.end_time, likely))
    likely_start = earliest = forecast.start if forecast else 0.0
    if forecast and blockers and forecast.start != INFINITY and not snap.settings.predict:
        # When running jobs end early, the whole plan behind them moves up by as much
        # (reservations of jobs ahead included): shift the forecast by their slack.
        last = max(b.expected_end for b in blockers)
        if last != INFINITY:
            slack = last - max(b.likely_end for b in blockers)
            early = [
                max(
                    snap.now, starts_of(b.job_id) + quarter * (b.expected_end - starts_of(b.job_id))
                )
                for b in blockers
            ]
            likely_start = max(snap.now, forecast.start - slack)
            earliest = max(snap.now, min(likely_start, forecast.start - (last - max(early))))
    return Explanation(
        rank=rank,
        ahead=rank - 1,
        reason=plan.reasons.get(job_id, ""),
        forecast=forecast,
        blockers=tuple(blockers),
        alternatives=tuple(_alternatives(snap, req, forecast, partitions_allowed)),
        likely_start=likely_start,
        earliest_start=earliest,
        history_ratio=median,
        history_jobs=len(ratios),
    )


def _variants(req: JobRequest, partitions_allowed: Sequence[str]) -> list[tuple[str, JobRequest]]:
    out: list[tuple[str, JobRequest]] = []
    if req.gpus_per_node > 1:
        fewer = req.gpus_per_node // 2
        out.append(
            (
                f"--gres=gpu:{fewer} (instead of {req.gpus_per_node} per node)",
                dataclasses.replace(req, gpus_per_node=fewer),
            )
        )
    if req.nodes_min > 1:
        out.append(
            (f"-N {req.nodes_min - 1}", dataclasses.replace(req, nodes_min=req.nodes_min - 1))
        )
    if req.time_limit_s < 0 or req.time_limit_s > 600:
        base = req.time_limit_s if req.time_limit_s > 0 else 86400
        for limit in sorted({base // 2, base // 4, 3600, 600}, reverse=True):
            if 0 < limit < base:
                out.append((f"-t {_duration(limit)}", dataclasses.replace(req, time_limit_s=limit)))
    for part in partitions_allowed:
        if part not in req.partitions:
            out.append((f"-p {part}", dataclasses.replace(req, partitions=(part,))))
    return out


def _alternatives(
    snap: Snapshot, req: JobRequest, forecast: Forecast | None, partitions_allowed: Sequence[str]
) -> list[Alternative]:
    current = forecast.start if forecast else INFINITY
    out = []
    for change, variant in _variants(req, partitions_allowed):
        pending = tuple(variant if r.job_id == req.job_id else r for r in snap.pending)
        plan: Plan = schedule(dataclasses.replace(snap, pending=pending))
        if any(s.job_id == req.job_id for s in plan.starts):
            out.append(Alternative(change, snap.now, True))
            continue
        f = plan.forecasts.get(req.job_id)
        if f is not None and f.start < current:
            out.append(Alternative(change, f.start, False))
    out.sort(key=lambda a: (not a.now, a.start))
    return out


def _duration(seconds: int) -> str:
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"
