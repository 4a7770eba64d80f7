"""A start at submit: new jobs placed against the last plan's reservations, by the pass.

Between two passes in which only jobs arrived or ended (no node, hold, requeue or
limit changed), a full pass decides for the waiting jobs what it decides for the
first job of each of their classes (the class verdict), so what it would now decide
for a new job is what a pass over a short queue decides: the last plan's reserved
jobs (their holds are what a start must not delay), the first waiting job of each
class and the longest waiter (``waiting_firsts``), and the new jobs, in priority
order. That pass is ``schedule`` itself, on a snapshot of the cluster as it is with
only those jobs pending. If it starts any of the waiting jobs, the short queue does
not stand for the whole one and a full pass decides (``quick_starts`` returns None);
otherwise the new jobs' starts are the full pass's. ctld and the simulator both call
these, so a replay takes the same path.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctld.sched.backfill import schedule
from ctld.sched.model import JobRequest, Plan, Snapshot, Start

# classes of waiting jobs a start at submit weighs, at most (more: a full pass decides)
MAX_CLASSES = 200


def priority_order(req: JobRequest) -> tuple[int, float, int]:
    """The queue's order, highest priority first (what a snapshot's ``pending`` is in)."""
    return (-req.priority, req.submit_time, req.job_id)


def reserved_jobs(plan: Plan) -> tuple[int, ...]:
    """The jobs ``plan`` reserved resources for: what a start at submit must not delay."""
    return tuple(f.job_id for f in plan.forecasts.values() if f.reserved)


def waiting_firsts(queue: Iterable[JobRequest], plan: Plan, limit: int) -> tuple[int, ...] | None:
    """Of a pass's queue (priority order) less what ``plan`` started, the first job of
    each class and the one waiting longest (the starvation guard's pick): the waiting
    jobs a start at submit
    weighs. Their class-mates get their verdict in a pass, so they stand for the
    whole queue; the longest waiter may have crossed the guard's threshold since.
    None when there are more than ``limit`` classes (a full pass is cheaper then)."""
    first: dict[int, int] = {}
    oldest: tuple[float, int] | None = None
    started = {s.job_id for s in plan.starts}
    for req in queue:
        if req.blocked_reason or req.job_id in started:
            continue
        if req.klass not in first:
            if len(first) >= limit:
                return None
            first[req.klass] = req.job_id
        key = (req.eligible_time or req.submit_time, req.job_id)
        if oldest is None or key < oldest:
            oldest = key
    if oldest is not None and oldest[1] not in first.values():
        return (*first.values(), oldest[1])
    return tuple(first.values())


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
