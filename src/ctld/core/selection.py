"""Job selections: the jobs a filter names (squeue's, scancel's and scontrol's ``-j``,
``-u``, ``-t``, ...), by index, and a page of them.

Read off State alone, so every layer above it selects jobs the same way: the queries
clients read (planning/queries.py), and the changes a filter names (jobs/intake.py:
scancel --user).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from itertools import islice

from corral.errors import InvalidJobId
from corral.wire import corral_pb2 as pb
from ctld.core.state import State


def select(state: State, flt: pb.JobFilter, *, strict: bool = True) -> list[pb.Job]:
    """The in-memory jobs matching ``flt`` (all given conditions must hold).

    ``strict``: ids were given and none is known -> InvalidJobId, as squeue -j says."""
    if flt.job_ids or flt.array_tasks:
        jobs = _by_ids(state, flt.job_ids, flt.array_tasks)
        if strict and not jobs:
            raise InvalidJobId()
    else:
        jobs = list(state.jobs.values())
    keep = matcher(flt)
    return jobs if keep is None else [j for j in jobs if keep(j)]


def matcher(flt: pb.JobFilter) -> Callable[[pb.Job], bool] | None:
    """Whether a job meets ``flt``'s conditions other than ids (None: every job does)."""
    users, states = set(flt.users), set(flt.states)
    names, parts, accts = set(flt.names), set(flt.partitions), set(flt.accounts)
    if not (users or states or names or parts or accts):
        return None
    return lambda j: (
        (not users or j.user in users)
        and (not states or j.state in states)
        and (not names or j.spec.name in names)
        and (not parts or j.partition in parts)
        and (not accts or j.account in accts)
    )


def page(
    state: State, flt: pb.JobFilter, after: int, limit: int, visible: Callable[[pb.Job], bool]
) -> list[pb.Job]:
    """The jobs matching ``flt`` that ``visible`` lets through, by id, past ``after``, at
    most ``limit`` (0: all): a page costs O(its jobs), not O(the map), so squeue's twenty
    pages over 100,000 jobs do not sort the map twenty times."""
    if flt.job_ids or flt.array_tasks:  # a few named jobs: select them, then page
        named = sorted((j for j in select(state, flt) if j.job_id > after), key=_job_id)
        return list(islice(filter(visible, named), limit or None))
    ids, jobs = state.index.ids_sorted(state.jobs), state.jobs
    keep = matcher(flt)
    out: list[pb.Job] = []
    for i in range(bisect.bisect_right(ids, after), len(ids)):
        job = jobs.get(ids[i])
        if job is not None and (keep is None or keep(job)) and visible(job):
            out.append(job)
            if len(out) == limit:
                break
    return out


def _job_id(job: pb.Job) -> int:
    return job.job_id


def _by_ids(state: State, job_ids: Iterable[int], array_tasks: Iterable[str]) -> list[pb.Job]:
    """Jobs named by id, where an array's master id names all its tasks, and
    ``N_T`` names task T of array N."""
    ids = set(job_ids)
    tasks: set[tuple[int, int]] = set()
    for ref in array_tasks:
        base, _, task = ref.partition("_")
        if not (base.isdigit() and task.isdigit()):
            raise InvalidJobId(f"Invalid job id specified: {ref[:64]}")
        tasks.add((int(base), int(task)))
    # by index, not a walk of every job in memory: scancel and squeue -j call this
    found: set[int] = set()
    for job_id in ids:
        if job_id in state.jobs:
            found.add(job_id)
        found.update(state.index.array_tasks.get(job_id, ()))
    for array_id, task_id in tasks:
        found.update(
            i
            for i in state.index.array_tasks.get(array_id, ())
            if state.jobs[i].array_task_id == task_id
        )
    return [state.jobs[i] for i in sorted(found)]
