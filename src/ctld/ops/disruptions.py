"""Planned disruptions under checkpointing jobs: signal first, requeue after the save.

When an operator (or a GPU health fault) drains a node, or a maintenance reservation
(``Flags=MAINT``) is about to start on it, the checkpointing jobs there (``--elastic``,
or ``--signal`` with a requeue allowed) get their ``--signal`` (an elastic job without
one: SIGUSR1; to its srun steps while any run, else to the batch script's processes)
and are marked to be requeued when they exit
(``requeue_on_exit``, durable, with the disruption as its detail). One that has not
exited by the deadline (``controller.disruption_lead_s`` after the drain, or the
reservation's start) is stopped as ``scontrol requeue`` stops it, and requeued all the
same. Other jobs keep Slurm's rules: a drain lets them finish. With
``controller.elastic_grow``, a shrunk elastic job is warned the same way when nodes
free up, and requeued bigger. docs/reliability.md.
"""

from __future__ import annotations

import signal as signal_mod
from collections.abc import Iterable

import structlog

from corral.errors import CorralError
from corral.jobspec import warn_signal
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord
from ctld.ops.endings import requeue_when_gone
from ctld.ops.spares import spare_nodes

log = structlog.get_logger("ctld")

Notice = tuple[int, bool, float]  # signal, batch shell only, lead time (s)


def notice(job: pb.Job, requeue_default: bool, lead_s: float) -> Notice | None:
    """(the signal, batch shell only, the lead time) a checkpointing ``job`` is warned
    with, or None: a job that is not one (it runs on as Slurm lets it) or may not be
    requeued. Checkpointing: ``--elastic``, or ``--requeue`` given with ``--signal``
    (whose ``@secs`` is then its lead time)."""
    spec = job.spec
    if job.state != js.RUNNING or spec.allocation_only:
        return None
    if not (spec.elastic or spec.requeue) or not failures.may_requeue(job, requeue_default):
        return None
    try:
        warn = warn_signal(spec)
    except CorralError:
        warn = None
    if warn is not None:
        return warn.signal, warn.batch_only, float(warn.seconds or lead_s)
    if spec.elastic:
        return int(signal_mod.SIGUSR1), False, lead_s
    return None


class Disruptions:
    def __init__(self, state: State, outbox: Outbox) -> None:
        self.state = state
        self.outbox = outbox

    def notice(self, job: pb.Job) -> Notice | None:
        ctl = self.state.config.controller
        return notice(job, ctl.job_requeue, ctl.disruption_lead_s)

    def warn(self, ch: Change, job: pb.Job, what: str, deadline: float, cause: str) -> bool:
        """Warn ``job`` of ``what`` and requeue it when it exits (stopped at ``deadline``
        if it has not): False if it is no checkpointing job or is warned already."""
        st = self.state
        how = self.notice(job)
        if how is None or job.disruption:
            return False
        sig, batch_only, _ = how
        ch.update(
            job,
            cause=cause,
            detail=f"{what}: signal {sig}, requeued once it exits (by {deadline:.0f})",
            disruption=what[:200],
            disruption_deadline=max(deadline, st.clock()),
            **requeue_when_gone(),
        )
        # its steps only while srun runs some (as Slurm's --signal without B:, so the
        # batch shell waiting on srun is not killed by it), else the batch shell's
        # processes (a script that runs its training itself)
        steps = any(step.state == js.RUNNING for step in job.steps)
        req = pb.SignalJobRequest(
            job_id=job.job_id,
            signal=sig,
            batch_only=batch_only,
            full=not batch_only and not steps,
            run=job.restart_count,
        )
        for alloc in job.allocations:
            node = st.nodes.get(alloc.node)
            if node is not None and (alloc.node == job.batch_host or not batch_only):
                ch.signal(node, req)
        log.info("checkpointing job warned", job_id=job.job_id, what=what, signal=sig)
        return True

    def drained(self, ch: Change, node: NodeRecord, reason: str, cause: str) -> None:
        """``node`` is being drained: its checkpointing jobs are warned and requeued."""
        now = self.state.clock()
        for job in self._running(node.job_ids):
            how = self.notice(job)
            if how is not None:
                what = f"node {node.name} drained: {reason}"
                self.warn(ch, job, what, now + how[2], cause)

    async def check(self) -> None:
        """The monitor's tick: maintenance about to start under checkpointing jobs, and
        warned jobs past their deadline (stopped, then requeued when gone)."""
        st = self.state
        now = st.clock()
        maint = [r for r in st.reservations.views() if "MAINT" in r.flags and now < r.start]
        due = [
            j
            for i in list(st.index.on_node_ids)
            if (j := st.jobs.get(i)) is not None
            and j.state == js.RUNNING
            and 0 < j.disruption_deadline <= now
        ]
        warn = [
            (job, r)
            for r in maint
            for job in self._running(
                i for name in r.nodes if name in st.nodes for i in st.nodes[name].job_ids
            )
            if not job.disruption
            and (how := self.notice(job)) is not None
            and r.start <= now + how[2]
        ]
        grow = self.growable() if st.config.controller.elastic_grow else []
        if not due and not warn and not grow:
            return
        async with Change(st, self.outbox, wake=False) as ch:
            for job, size in grow:
                what = f"grow to {size} nodes: nodes are free"
                self.warn(ch, job, what, now + (self.notice(job) or (0, 0, 0.0))[2], "timer:grow")
            for job, r in warn:
                what = f"maintenance reservation {r.name} starts"
                self.warn(ch, job, what, r.start, "timer:maintenance")
            for job in due:
                ch.update(job, cause="timer:disruption", detail="deadline", disruption_deadline=0)
                ch.signal_all(self.outbox.terminate_everywhere(job))
                log.info("warned job stopped at its deadline", job_id=job.job_id)

    def growable(self) -> list[tuple[pb.Job, int]]:
        """Running elastic jobs below their maximum, with idle nodes (not spares) in their
        partition that no waiting job there could take first: (job, the size it could
        have)."""
        st = self.state
        jobs = [
            j
            for i in st.index.on_node_ids
            if (j := st.jobs.get(i)) is not None
            and j.state == js.RUNNING
            and j.spec.elastic
            and len(j.allocations) < j.spec.nodes_max
            and not j.disruption
        ]
        if not jobs:
            return []
        waiting = {
            p
            for i in st.index.pending
            if (w := st.jobs.get(i)) is not None and w.hold == pb.HOLD_NONE
            for p in w.spec.partitions
        }
        spares = spare_nodes(st)
        parts = {p.name: p for p in st.config.partitions}
        out = []
        for job in jobs:
            part = parts.get(job.partition)
            if part is None or part.name in waiting:
                continue
            free = [
                n
                for n in part.nodes
                if (node := st.nodes.get(n)) is not None
                and node.schedulable
                and not node.job_ids
                and n not in spares
            ]
            if free:
                out.append((job, min(job.spec.nodes_max, len(job.allocations) + len(free))))
        return out

    def _running(self, ids: Iterable[int]) -> list[pb.Job]:
        jobs = self.state.jobs
        return [
            j for i in sorted(set(ids)) if (j := jobs.get(i)) is not None and j.state == js.RUNNING
        ]
