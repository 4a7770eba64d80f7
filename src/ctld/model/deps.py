"""Job dependencies (--dependency) as Slurm evaluates them.

Each condition is met, still waiting, or can never be met:

    after:ID[+MIN]   ID has started (or was cancelled before starting), MIN minutes ago
    afterany:ID      ID has ended, in any state
    afterok:ID       ID completed with exit code 0 (aftercorr: the same, without arrays)
    afternotok:ID    ID ended in any state but COMPLETED
    singleton        no earlier job of the same name and user is pending or running

``a,b`` needs all, ``a?b`` any one. An array's id stands for all its tasks, ``ID_T``
for one. A job no longer known (purged long ago) counts as
ended successfully, as in Slurm, where the dependency is then lifted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum

from corral.errors import CorralError
from corral.jobspec import dependencies
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js


class DepState(Enum):
    MET = "met"
    WAITING = "waiting"
    NEVER = "never"


Lookup = Callable[[int], pb.Job | None]


def evaluate(
    job: pb.Job,
    lookup: Lookup,
    now: float,
    singleton_holders: Callable[[pb.Job], bool],
    tasks_of: Callable[[int], list[pb.Job]] = lambda _id: [],
) -> DepState:
    """Where ``job``'s --dependency stands (MET when it has none), from its typed
    conditions (parsed once, at submit)."""
    try:
        typed = dependencies(job.spec)
    except CorralError:
        return DepState.NEVER  # checked at submit; a stored bad value cannot run
    if typed is None:
        return DepState.MET
    states = [_one(c, lookup, now, job, singleton_holders, tasks_of) for c in typed.conditions]
    return combine(states, any_of=typed.any_of)


def combine(states: Iterable[DepState], *, any_of: bool) -> DepState:
    states = list(states)
    if any_of:
        if DepState.MET in states:
            return DepState.MET
        return DepState.NEVER if all(s is DepState.NEVER for s in states) else DepState.WAITING
    if DepState.NEVER in states:
        return DepState.NEVER
    return DepState.MET if all(s is DepState.MET for s in states) else DepState.WAITING


def _one(
    cond: pb.DependencyCondition,
    lookup: Lookup,
    now: float,
    job: pb.Job,
    singleton_holders: Callable[[pb.Job], bool],
    tasks_of: Callable[[int], list[pb.Job]],
) -> DepState:
    kind = cond.kind
    if kind == "singleton":
        return DepState.WAITING if singleton_holders(job) else DepState.MET
    results = []
    for ref in cond.jobs:
        delay_s = ref.delay_min * 60
        if ref.HasField("task_id"):
            found = [j for j in tasks_of(ref.job_id) if j.array_task_id == ref.task_id]
            results.append(_against(kind, found[0] if found else None, now, delay_s))
            continue
        members = tasks_of(ref.job_id)  # an array's id stands for all of its tasks
        if members:
            results.extend(_against(kind, m, now, delay_s) for m in members)
        else:
            results.append(_against(kind, lookup(ref.job_id), now, delay_s))
    return combine(results, any_of=False)


def _against(kind: str, other: pb.Job | None, now: float, delay_s: int) -> DepState:
    if other is None:
        return DepState.MET
    state = other.state
    ended = state in js.FINISHED
    if kind == "after":
        if state == js.PENDING:
            return DepState.WAITING
        began = other.start_time or other.end_time
        return DepState.MET if now >= began + delay_s else DepState.WAITING
    if not ended:
        return DepState.WAITING
    if kind == "afterany":
        return DepState.MET
    if kind in ("afterok", "aftercorr"):
        return DepState.MET if state == js.COMPLETED else DepState.NEVER
    if kind == "afternotok":
        return DepState.NEVER if state == js.COMPLETED else DepState.MET
    return DepState.MET  # afterburstbuffer: no burst buffers here
