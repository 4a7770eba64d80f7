"""corral why: a pending job, explained against the very snapshot the scheduler uses.

Everything here is read off a plan or computed by running the same pure ``schedule``
on a copy of the snapshot with one thing changed (fewer GPUs, a shorter limit, another
partition, an advance reservation left out), so a suggestion is never a guess: a
change is offered only when the job would really start sooner with it, by the same
measure as its own start. The plan assumes every running job runs to its time limit,
unless the scheduler plans with predicted run times (``scheduler.predict``, the
default): then the plan already is the likely start, and a blocker's likely end is its
prediction. By limits only, the "likely" start corrects the plan with how long
recently finished jobs really ran against their limits.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from corral.reasons import WAITS_ITS_TURN, Reason
from corral.slurmfmt import HOURS, format_duration
from ctld.sched import INFINITY, JobRequest, Plan, Snapshot, schedule
from ctld.sched.model import Forecast, ReservationView
from ctld.sched.predict import expected_end

# a change is suggested only if it gains at least this much: less is rounding
MIN_GAIN_S = 60.0


@dataclasses.dataclass(frozen=True)
class Blocker:
    job_id: int
    nodes: tuple[str, ...]
    expected_end: float
    likely_end: float


@dataclasses.dataclass(frozen=True)
class Alternative:
    change: str
    start: float  # its likely start (the plan's, corrected as the job's own is)
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
    predicted: bool = False  # the plan uses predicted run times (scheduler.predict)
    starts_now: bool = False  # it fits now: the next pass starts it
    # advance reservations it waits for: its own (to begin), or others' that hold
    # nodes it needs (without them it would start sooner: computed, as alternatives)
    reservations: tuple[ReservationView, ...] = ()


@dataclasses.dataclass(frozen=True)
class _History:
    median: float
    quarter: float
    starts_of: Callable[[int], float]


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
    history = _History(
        statistics.median(ratios) if ratios else 1.0,
        ratios[len(ratios) // 4] if ratios else 1.0,
        starts_of,
    )
    starts_now = _starts(plan, job_id)
    forecast = plan.forecasts.get(job_id)
    blockers = _blockers(snap, forecast, history)
    likely_start, earliest = _range(snap, forecast, blockers, history)
    reason = plan.reasons.get(job_id, "")
    own = _own_start(snap.now, starts_now, forecast, likely_start, reason)
    return Explanation(
        rank=rank,
        ahead=rank - 1,
        reason=reason,
        forecast=forecast,
        blockers=tuple(blockers),
        alternatives=()
        if starts_now  # nothing is sooner than now
        else tuple(_alternatives(snap, req, own, history, partitions_allowed)),
        likely_start=likely_start,
        earliest_start=earliest,
        history_ratio=history.median,
        history_jobs=len(ratios),
        predicted=snap.settings.predict,
        starts_now=starts_now,
        reservations=() if starts_now else _reservations(snap, req, plan, own, history),
    )


def _own_start(
    now: float, starts_now: bool, forecast: Forecast | None, likely: float, reason: str
) -> float | None:
    """What a change must beat: its likely start; INFINITY when it cannot run as it is
    (a partition's limit, a node it requires: any start is sooner); None when it waits
    its turn without a forecast (beyond the plan's depth, an advance reservation in its
    way, or an accounting limit): then its start is unknown, and only a change that
    starts it at once is surely sooner."""
    if starts_now:
        return now
    if forecast is not None:
        return likely
    if reason in WAITS_ITS_TURN or reason.startswith(("Assoc", "QOS")):
        return None
    return INFINITY


def _starts(plan: Plan, job_id: int) -> bool:
    return any(s.job_id == job_id for s in plan.starts)


def _blockers(snap: Snapshot, forecast: Forecast | None, history: _History) -> list[Blocker]:
    """The running jobs ``forecast`` waits for, each with its limit's end and likely end."""
    running = {r.job_id: r for r in snap.running}
    blockers = []
    for other in forecast.waits_for if forecast else ():
        run = running.get(other)
        if run is None:
            continue
        began = history.starts_of(other)
        limit = run.end_time - began
        if snap.settings.predict and run.predicted_s > 0:
            likely = expected_end(began, run.predicted_s, run.end_time, snap.now)
        elif run.end_time != INFINITY:
            likely = max(snap.now, began + history.median * limit)
        else:
            likely = INFINITY
        blockers.append(Blocker(other, tuple(p.node for p in run.placements), run.end_time, likely))
    return blockers


def _range(
    snap: Snapshot, forecast: Forecast | None, blockers: list[Blocker], history: _History
) -> tuple[float, float]:
    """The likely and the earliest start: the plan's, moved up by what history says the
    blockers leave of their limits (the plan already is the likely one by predictions)."""
    likely = earliest = forecast.start if forecast else 0.0
    if forecast and blockers and forecast.start != INFINITY and not snap.settings.predict:
        # When running jobs end early, the whole plan behind them moves up by as much
        # (reservations of jobs ahead included): shift the forecast by their slack.
        last = max(b.expected_end for b in blockers)
        if last != INFINITY:
            slack = last - max(b.likely_end for b in blockers)
            starts_of = history.starts_of
            early = [
                max(
                    snap.now,
                    starts_of(b.job_id) + history.quarter * (b.expected_end - starts_of(b.job_id)),
                )
                for b in blockers
            ]
            likely = max(snap.now, forecast.start - slack)
            earliest = max(snap.now, min(likely, forecast.start - (last - max(early))))
    return likely, earliest


def _sooner(snap: Snapshot, job_id: int, own: float | None, history: _History) -> float | None:
    """When ``job_id`` likely starts in ``snap``'s plan, if that is sooner than ``own``
    (its likely start as it is; see _own_start) by MIN_GAIN_S; else None."""
    plan = schedule(snap)
    if _starts(plan, job_id):
        return snap.now
    f = plan.forecasts.get(job_id)
    if own is None or f is None or f.start == INFINITY:
        return None
    likely, _ = _range(snap, f, _blockers(snap, f, history), history)
    return likely if likely <= own - MIN_GAIN_S else None


def _reservations(
    snap: Snapshot, req: JobRequest, plan: Plan, own: float | None, history: _History
) -> tuple[ReservationView, ...]:
    """Its own reservation while it waits for it to begin; any other reservation on
    nodes of its partitions without which it would start sooner."""
    out = []
    parts = set(req.partitions)
    usable = {n for p in snap.partitions if p.name in parts for n in p.nodes}
    for resv in snap.reservations:
        if resv.end <= snap.now:
            continue
        if resv.name == req.reservation:
            if plan.reasons.get(req.job_id) == Reason.RESERVATION:
                out.append(resv)
            continue
        if not usable & set(resv.nodes):
            continue
        if own is not None and own != INFINITY and 0 < req.time_limit_s <= resv.start - own:
            # it begins after the job would end: leaving it out frees nothing sooner (the
            # jobs ahead it delays could only take more of what the job would use)
            continue
        without = tuple(r for r in snap.reservations if r is not resv)
        found = _sooner(dataclasses.replace(snap, reservations=without), req.job_id, own, history)
        if found is not None:
            out.append(resv)
    return tuple(out)


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
                # (a prediction never exceeds the limit: the core's invariant)
                shorter = dataclasses.replace(
                    req, time_limit_s=limit, predicted_s=min(req.predicted_s, limit)
                )
                out.append((f"-t {format_duration(limit, HOURS)}", shorter))
    for part in partitions_allowed:
        if part not in req.partitions:
            out.append((f"-p {part}", dataclasses.replace(req, partitions=(part,))))
    return out


def _alternatives(
    snap: Snapshot,
    req: JobRequest,
    own: float | None,
    history: _History,
    partitions_allowed: Sequence[str],
) -> list[Alternative]:
    """Each change that, alone, makes it likely start sooner than ``own`` (its likely
    start as it is) by MIN_GAIN_S: computed on the plan, never a guess."""
    out = []
    for change, variant in _variants(req, partitions_allowed):
        pending = tuple(variant if r.job_id == req.job_id else r for r in snap.pending)
        start = _sooner(dataclasses.replace(snap, pending=pending), req.job_id, own, history)
        if start is not None:
            out.append(Alternative(change, start, start == snap.now))
    out.sort(key=lambda a: (not a.now, a.start))
    return out
