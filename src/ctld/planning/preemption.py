"""QoS preemption in ctld: carrying out what the core decided (``Plan.preemptions``).

The core (``ctld/sched/preempt.py``) picks the victims and where the preemptor will
run; here, for each victim (Slurm's preempt/qos with GraceTime):

- now: the preemption enters its story, and it gets its ``--signal`` (as that option
  says: ``B:`` the batch shell, else its steps) or else SIGTERM to all its processes;
  with no grace time, the terminate at once;
- after its QOS's ``grace_time``: the terminate (SIGCONT+SIGTERM, SIGKILL after KillWait);
- when its node reports it gone (whatever its exit): requeued (mode requeue, if the job
  may be requeued: ``failures.may_requeue``), its run recorded PREEMPTED for sacct -D,
  else ended PREEMPTED (``Endings.preempted``).

What the preemptor will use is *claimed* (the snapshot's ``claims``) until it starts,
so no other job is planned on it. Claims and victims are kept in memory: after a ctld
restart the victims run on as before, and the next passes preempt again for the
preemptor if it still needs it.
"""

from __future__ import annotations

import signal as signal_mod

import structlog

from corral.errors import CorralError
from corral.jobspec import warn_signal
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox, Signal
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord
from ctld.model.victims import ClaimRecord, Victim
from ctld.sched import Plan

log = structlog.get_logger("ctld")


class Preempter:
    def __init__(self, state: State, outbox: Outbox) -> None:
        self.state = state
        self.outbox = outbox
        self.preempted_total = 0

    async def apply(self, plan: Plan, *, pass_no: int) -> None:
        """Carry out the plan's preemptions that still hold (called by the applier)."""
        st = self.state
        book = st.preemptions
        now = st.clock()
        async with Change(st, self.outbox, wake=False) as ch:
            for p in plan.preemptions:
                job = st.jobs.get(p.job_id)
                victims = [st.jobs.get(v) for v in p.victims]
                if job is None or job.state != js.PENDING or p.job_id in book.claims:
                    continue
                if not all(
                    v is not None
                    and v.state == js.RUNNING
                    and not v.spec.allocation_only
                    and book.victim(v) is None
                    for v in victims
                ):
                    continue  # the state moved since the snapshot: a later pass decides
                book.claims[job.job_id] = ClaimRecord(
                    job.job_id, p.partition, p.placements, set(p.victims)
                )
                for victim in victims:
                    assert victim is not None
                    self._preempt(ch, victim, job, now, f"sched:pass={pass_no}")
                log.info("preempting", job_id=job.job_id, qos=job.qos, victims=list(p.victims))

    def _preempt(
        self, ch: Change, victim: pb.Job, preemptor: pb.Job, now: float, cause: str
    ) -> None:
        st = self.state
        mode = st.acct.qos.preempt_mode(victim.qos)
        grace = st.acct.qos.grace_s(victim.qos)
        kill_wait = st.config.controller.kill_wait_s
        record = Victim(
            victim.job_id,
            victim.restart_count,
            preemptor.job_id,
            mode,
            grace_end=now + grace,
            deadline=now + grace + kill_wait,
        )
        st.preemptions.victims[victim.job_id] = record
        self.preempted_total += 1
        ch.transition(
            victim,
            "signalled",
            cause=cause,
            now=now,
            detail=(
                f"preempted by job {preemptor.job_id} (QOS {preemptor.qos}): "
                f"{mode} after {grace}s grace time"
            ),
        )
        if grace <= 0:
            record.terminated = True
            self._terminate(ch, victim)
            return
        ch.signal_all(self._notice(victim))  # the terminate follows: expire()

    def _notice(self, job: pb.Job) -> list[Signal]:
        """The first signal of a preemption with a grace time: the job's --signal if it
        asked for one, else SIGTERM to every process of the job."""
        try:
            warn = warn_signal(job.spec)
        except CorralError:
            warn = None
        if warn is None:
            req = pb.SignalJobRequest(
                job_id=job.job_id, signal=int(signal_mod.SIGTERM), full=True, run=job.restart_count
            )
            return [(node, req) for node in self._nodes(job)]
        req = pb.SignalJobRequest(
            job_id=job.job_id, signal=warn.signal, batch_only=warn.batch_only, run=job.restart_count
        )
        return [
            (node, req)
            for node in self._nodes(job)
            if node.name == job.batch_host or not warn.batch_only
        ]

    def _nodes(self, job: pb.Job) -> list[NodeRecord]:
        nodes = (self.state.nodes.get(a.node) for a in job.allocations)
        return [n for n in nodes if n is not None]

    def _terminate(self, ch: Change, job: pb.Job) -> None:
        ch.signal_all(self.outbox.terminate_elsewhere(job))
        ch.signal(*self.outbox.terminate_batch(job))

    async def expire(self) -> None:
        """Terminate the victims whose grace time is over (the scheduler loop calls this
        before each pass, and wakes for the next grace end)."""
        st = self.state
        now = st.clock()
        due = [
            job
            for v in st.preemptions.victims.values()
            if not v.terminated
            and v.grace_end <= now
            and (job := st.jobs.get(v.job_id)) is not None
            and job.state == js.RUNNING
            and job.restart_count == v.run
        ]
        if not due:
            return
        async with Change(st, self.outbox, wake=False) as ch:
            for job in due:
                st.preemptions.victims[job.job_id].terminated = True
                ch.transition(job, "signalled", cause="sched:preempt", detail="grace time over")
                self._terminate(ch, job)
