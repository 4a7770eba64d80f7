"""A start at submit: new jobs placed against the last plan's reservations, by the pass.

Between two passes in which only jobs arrived (nothing ended, no node or limit
changed), every pending job the last pass left waiting still cannot start: a pass only
takes resources away, and only arrivals took any since. So what a full pass would now
decide for a new job is what a pass over a short queue decides: the last plan's
reserved jobs (their holds are what a start must not delay) and the new jobs, in
priority order. That pass is ``schedule`` itself, on a snapshot of the cluster as it is
with only those jobs pending; of its plan, only the new jobs' starts are taken (ctld
and the simulator both call ``quick_starts``, so a replay takes the same path).
"""

from __future__ import annotations

from collections.abc import Iterable

from ctld.sched.backfill import schedule
from ctld.sched.model import JobRequest, Plan, Snapshot, Start


def priority_order(req: JobRequest) -> tuple[int, float, int]:
    """The queue's order, highest priority first (what a snapshot's ``pending`` is in)."""
    return (-req.priority, req.submit_time, req.job_id)


def reserved_jobs(plan: Plan) -> tuple[int, ...]:
    """The jobs ``plan`` reserved resources for: what a start at submit must not delay."""
    return tuple(f.job_id for f in plan.forecasts.values() if f.reserved)


def quick_queue(
    reserved: Iterable[JobRequest], new: Iterable[JobRequest]
) -> tuple[JobRequest, ...]:
    """The short queue a start at submit is decided on, in priority order."""
    return tuple(sorted([*reserved, *new], key=priority_order))


def quick_starts(snapshot: Snapshot, new: Iterable[int]) -> tuple[Start, ...] | None:
    """The starts of the new jobs ``new`` in a pass over ``snapshot`` (whose ``pending``
    is ``quick_queue``'s). None when the short queue cannot stand for the whole one: a
    job other than the new ones would start (resources were freed since the last pass,
    so the jobs waiting behind it may start too), a preemptor holds a claim, or there is
    no backfill (a strict FCFS queue starts a new job only when nothing waits ahead of
    it, which only a full pass knows)."""
    if not snapshot.settings.backfill or snapshot.claims:
        return None
    ids = set(new)
    starts = schedule(snapshot).starts
    if any(s.job_id not in ids for s in starts):
        return None
    return starts
