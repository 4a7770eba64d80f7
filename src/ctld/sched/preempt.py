"""Preemption (Slurm's preempt/qos): the running jobs a blocked job may take resources from.

A pending job whose QOS lists other QOSes in ``preempts`` and that cannot start now
looks at the running jobs of those QOSes, except jobs whose own QOS could preempt its
QOS back (so two jobs never take the same resources from each other in turn) and jobs
of a QOS whose mode is "off". Candidates are taken lowest first (QOS priority, then job
priority, then the youngest) until, with everything they hold given back now, the job
fits for its whole time limit without delaying any reservation; then each victim is
dropped again, the most valuable first, while the job still fits without it. So the
set is small and made of the lowest jobs, and nothing is preempted for a job that would
still not fit. What the job will use is then claimed (holds that only it ignores)
until it starts, so that no other job, backfilled or not, takes what was freed for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ctld.sched.model import INFINITY, QosView, RunningView
from ctld.sched.profile import Hold, NodeProfile

DEFAULT_QOS = "normal"


def claim_owner(job_id: int) -> str:
    return f"claim:{job_id}"


def targets(qos: Iterable[QosView]) -> dict[str, frozenset[str]]:
    """QOS -> the QOSes its jobs may preempt (only QOSes that preempt something)."""
    return {q.name: frozenset(q.preempts) for q in qos if q.preempts}


def pool(
    own_qos: str,
    running: Iterable[RunningView],
    qos: dict[str, QosView],
    may_preempt: dict[str, frozenset[str]],
    taken: set[int],
    nodes: set[str] | None = None,
) -> list[RunningView]:
    """The running jobs a job of ``own_qos`` may preempt (on ``nodes``), lowest first."""
    own = own_qos or DEFAULT_QOS
    allowed = may_preempt.get(own, frozenset())
    found = []
    for run in running:
        name = run.qos or DEFAULT_QOS
        view = qos.get(name)
        if (
            view is None
            or name not in allowed
            or view.mode == "off"
            or not run.preemptable
            or run.job_id in taken
            or own in may_preempt.get(name, frozenset())  # it could preempt back: no loops
            or (nodes is not None and not any(p.node in nodes for p in run.placements))
        ):
            continue
        found.append(run)
    found.sort(
        key=lambda r: (qos[r.qos or DEFAULT_QOS].priority, r.priority, -r.start_time, -r.job_id)
    )
    return found


def freed(node: NodeProfile, victims: frozenset[int]) -> NodeProfile:
    """``node`` as it would be with ``victims`` gone now."""
    gone = [r for r in node.releases if r.job_id in victims]
    if not gone:
        return node
    keep = [r for r in node.releases if r.job_id not in victims]
    gpus = set(node.free_gpus)
    for r in gone:
        gpus |= r.gpus
    return dataclasses.replace(
        node,
        free_cpus=node.free_cpus + sum(r.cpus for r in gone),
        free_mem=node.free_mem + sum(r.mem for r in gone),
        free_gpus=gpus,
        busy=bool(keep),
        releases=keep,
        holds=list(node.holds),
        _index_len=-1,
        _ends=[],
        _cum=[],
        _lindex_len=-1,
        _lends=[],
        _lcum=[],
    )


def victims_end(node: NodeProfile, victims: frozenset[int], now: float) -> float:
    """When the last of ``victims`` on ``node`` is expected to have let go."""
    return max((r.end for r in node.releases if r.job_id in victims), default=now)


def claim_holds(
    node: NodeProfile,
    owner: str,
    cpus: int,
    mem: int,
    gpus: Iterable[int],
    victims: frozenset[int],
    now: float,
) -> list[Hold]:
    """Holds keeping (cpus, mem, gpus) on ``node`` for ``owner``: the part free now until
    the victims there are gone, the whole from then on (so that nothing is counted
    twice while the victims still hold their part)."""
    wanted = frozenset(gpus)
    gone = [r for r in node.releases if r.job_id in victims]
    if not gone:
        return [Hold(now, INFINITY, cpus, mem, wanted, owner)]
    t = victims_end(node, victims, now)
    v_gpus: frozenset[int] = frozenset().union(*(r.gpus for r in gone))
    before = Hold(
        now,
        t,
        max(0, cpus - sum(r.cpus for r in gone)),
        max(0, mem - sum(r.mem for r in gone)),
        wanted - v_gpus,
        owner,
    )
    return [before, Hold(t, INFINITY, cpus, mem, wanted, owner)]
