"""How a job leaves its nodes: it ends, is cancelled, or goes back to the queue.

Shared by the operations that end jobs (a client's cancel, a node's exit report, an
allocation's release or time limit, a failed launch). Each function makes its part
of a ``Change`` (the transition and the signals it needs); the caller commits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog

from corral import ettr
from corral.errors import JobStateConflict
from corral.jobspec import tasks_per_node
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State, request_totals
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord

Update = pb.JobStatusUpdate
log = structlog.get_logger("ctld")


class Endings:
    def __init__(self, state: State, outbox: Outbox) -> None:
        self.state = state
        self.outbox = outbox

    def cancel(self, ch: Change, job: pb.Job, cause: str, now: float, **fields: Any) -> None:
        """Cancel ``job`` (setting ``fields`` with it): a pending one ends now, a running
        one is asked to stop."""
        if job.state == js.PENDING:
            ch.transition(
                job, "cancelled", cause=cause, now=now, end_time=now, reason="None", **fields
            )
            return
        if job.state == js.RUNNING and job.spec.allocation_only:
            # no batch step to wait for: the allocation ends now, its steps are killed
            self.end_allocation(
                ch, job, js.CANCELLED, cause=cause, exit_code=0, exit_signal=0, **fields
            )
            return
        if job.state == js.RUNNING and job.HasField("held_end"):
            # its script has ended (the end waits for a node's verdict): nothing to stop
            held = pb.JobStatusUpdate()
            held.CopyFrom(job.held_end)
            ch.transition(job, "cancel_requested", cause=cause, now=now, **fields)
            self.finish(ch, job, held, cause)
            return
        if job.state == js.RUNNING:
            ch.transition(job, "cancel_requested", cause=cause, now=now, **fields)
            ch.signal_all(self.outbox.terminate_elsewhere(job))
            ch.signal(*self.outbox.terminate_batch(job))
            return
        raise JobStateConflict()

    def exited(self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> None:
        """The job's script ended as ``upd`` says (a node's report, or a held end whose
        node was judged alive); an allocation's held release (CompleteJob) too."""
        if job.spec.allocation_only:
            final = js.COMPLETED if not (upd.exit_code or upd.exit_signal) else js.FAILED
            # its step could not start (srun's CompleteJob says why): a launch failure
            refused = {"reason": f"launch failed: {upd.detail}"[:200]} if upd.detail else {}
            self.end_allocation(
                ch,
                job,
                final,
                cause=cause,
                exit_code=upd.exit_code,
                exit_signal=upd.exit_signal,
                **(refused if final == js.FAILED else {}),
            )
        elif job.state == js.COMPLETING:  # cancelled meanwhile: it ends CANCELLED
            self.finish(ch, job, upd, cause, **NO_REQUEUE)
        elif self.preempted(ch, job, upd, cause):
            pass
        elif job.requeue_on_exit:
            detail = job.disruption or upd.detail or "requeued on request"
            hold = asked_hold(job)
            why = ettr.cause_of(detail, disruption=job.disruption) if job.disruption else ""
            # grown onto nodes that are back: the ones it failed on are no longer shunned
            regrown: js.Fields = {"failed_nodes": []} if why == "grow" else {}
            self.requeue(
                ch,
                job,
                cause=cause,
                detail=detail,
                hold=hold,
                interruption=why or "operator",
                checkpoint_time=upd.checkpoint_time,
                usage=upd.usage,
                **NO_REQUEUE,
                **regrown,
            )
        else:
            self.finish(ch, job, upd, cause)

    def hold_end(self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> bool:
        """While srun's lost node awaits its verdict, the end reported is kept in the job
        (durable), not applied: if the node failed, the job failed with it, whatever its
        script's exit (ctld/ops/suspects.py). False: nothing is suspect, apply it now."""
        if not job.suspect_nodes or job.state != js.RUNNING:
            return False
        nodes = ",".join(s.node for s in job.suspect_nodes)
        ch.update(
            job,
            cause=cause,
            detail=f"its end (exit {upd.exit_code}:{upd.exit_signal}) waits for the "
            f"verdict on {nodes}",
            held_end=upd,
        )
        log.info("job end held for a node's verdict", job_id=job.job_id, nodes=nodes)
        return True

    def finish(
        self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str, **fields: Any
    ) -> None:
        """The node reports the job's end: its final state, exit and usage."""
        now = self.state.clock()
        if upd.end_reason == Update.END_TIMEOUT:
            final = js.TIMEOUT
        elif upd.end_reason == Update.END_OUT_OF_MEMORY:
            final = js.OUT_OF_MEMORY
        elif job.state == js.COMPLETING or upd.signalled_by_request:
            final = js.CANCELLED
        elif upd.exit_signal:
            final = js.FAILED
        elif upd.exit_code == 0:
            final = js.COMPLETED
        else:
            final = js.FAILED
        code, sig = _exit(upd.exit_code, upd.exit_signal)
        reason = {
            js.TIMEOUT: "TimeLimit",
            js.OUT_OF_MEMORY: "OutOfMemory",
            js.FAILED: "NonZeroExitCode" if upd.exit_code else "None",
        }.get(final, "None")
        ch.transition(
            job,
            "exited",
            cause=cause,
            to=final,
            detail=f"exit {code}:{sig}",
            usage=upd.usage,
            exit_code=code,
            exit_signal=sig,
            end_time=max(upd.time, job.start_time) if upd.time else now,
            reason=reason,
            **{**fields, **failures.no_suspects()},
        )
        if any(step.state == js.RUNNING for step in job.steps):
            # the batch script is gone: its steps on the other nodes go too (Slurm's rule)
            ch.signal_all(self.outbox.terminate_elsewhere(job))
        self.end_running_steps(ch, job, final)
        self._ended(job)
        log.info(
            "job ended",
            job_id=job.job_id,
            node=job.batch_host,
            state=js.state_name(final),
            exit_code=job.exit_code,
            signal=job.exit_signal,
        )

    def preempted(self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> bool:
        """The node reports a job being preempted gone (however it ended: a job that
        saved its state and exited on the notice was preempted too): requeue it, its run
        recorded PREEMPTED, or (mode cancel, or a job that may not be requeued, as
        Slurm's REQUEUE mode does) end it PREEMPTED. False if it is not being preempted."""
        st = self.state
        victim = st.preemptions.victim(job)
        if victim is None:
            return False
        del st.preemptions.victims[job.job_id]
        code, sig = _exit(upd.exit_code, upd.exit_signal)
        ended = {"usage": upd.usage, "exit_code": code, "exit_signal": sig, **NO_REQUEUE}
        detail = f"preempted by job {victim.preemptor}"
        if victim.mode == "requeue" and failures.may_requeue(job, st.config.controller.job_requeue):
            self.requeue(
                ch,
                job,
                cause=cause,
                detail=detail,
                run_state=js.PREEMPTED,
                interruption="preemption",
                checkpoint_time=upd.checkpoint_time,
                **ended,
            )
            log.info("preempted job requeued", job_id=job.job_id, by=victim.preemptor)
            return True
        ch.transition(
            job,
            "exited",
            cause=cause,
            to=js.PREEMPTED,
            detail=detail,
            end_time=max(upd.time, job.start_time) if upd.time else st.clock(),
            reason="None",
            **{**ended, **failures.no_suspects()},
        )
        self.end_running_steps(ch, job, js.CANCELLED)
        self._ended(job)
        log.info("preempted job ended", job_id=job.job_id, by=victim.preemptor)
        return True

    def end_allocation(
        self,
        ch: Change,
        job: pb.Job,
        final: int,
        *,
        cause: str,
        exit_code: int,
        exit_signal: int,
        **fields: Any,
    ) -> None:
        """An allocation (salloc/srun) ends: released, timed out or cancelled (or a job
        that a node failure ends)."""
        code, sig = _exit(exit_code, exit_signal)
        reasons: dict[int, str] = {js.TIMEOUT: "TimeLimit", js.FAILED: "NonZeroExitCode"}
        self.end_running_steps(ch, job, final)
        ch.signal_all(self.outbox.terminate_everywhere(job))
        ch.transition(
            job,
            "exited",
            cause=cause,
            to=final,
            detail=f"allocation released, exit {code}:{sig}",
            **{
                "exit_code": code,
                "exit_signal": sig,
                "end_time": self.state.clock(),
                "reason": reasons.get(final, "None"),
                **fields,
                **failures.no_suspects(),
            },
        )
        self._ended(job)

    def _ended(self, job: pb.Job) -> None:
        self.state.live.checkpoints.pop(job.job_id, None)
        self.state.release(job)
        self.state.acct.ledger.add_finished(job)
        self.state.remember_run(job)

    def end_running_steps(self, ch: Change, job: pb.Job, final: int) -> None:
        """A job that ends ends its steps (their tasks die with it)."""
        for step in job.steps:
            if step.state == js.RUNNING:
                ch.end_step(
                    job,
                    step,
                    js.CANCELLED if final != js.TIMEOUT else js.TIMEOUT,
                    self.state.clock(),
                    exit_code=step.exit_code,
                    exit_signal=step.exit_signal,
                )

    def requeue(
        self,
        ch: Change,
        job: pb.Job,
        *,
        cause: str,
        detail: str,
        run_state: int = pb.JOB_STATE_REQUEUED,
        hold: int = pb.HOLD_NONE,
        not_before: float = 0.0,
        interruption: str = "node_fail",
        checkpoint_time: float = 0.0,
        **fields: Any,
    ) -> None:
        """Put a RUNNING job back in the queue (``fields`` set first: the run that ended
        keeps them too); it keeps its age and counts a restart.

        The run that ended is kept for sacct -D; with controller.requeue_delay_s (or
        ``not_before``) the job waits (reason BeginTime); --requeue=expedite puts it
        first in the queue.
        """
        js.check(job, "requeued", cause)  # before anything changes: never half a requeue
        st = self.state
        now = st.clock()
        # the run's steps end with it (Slurm's rule): a step whose nodes had not yet said
        # so must not hold the next run's CPUs and GPUs (its later report changes nothing)
        self.end_running_steps(ch, job, js.CANCELLED)
        ended = {**fields, **failures.no_suspects()}
        if run_state != pb.JOB_STATE_REQUEUED:
            ended["reason"] = detail[:200]  # sacct -D shows why that run ended
        # the run's time counts in fair-share like any finished job's (Slurm charges
        # every run); its record is what a restarted ctld reloads the ledger from
        st.acct.ledger.add_finished(ch.end_run(job, run_state, **ended))
        mark = max(checkpoint_time, st.live.checkpoints.pop(job.job_id, 0.0))
        record = interruption_record(job, interruption, now, mark, detail)
        st.release(job)
        again: js.Fields = {
            **fields,
            **previous_run(job, fields.get("failed_nodes", job.failed_nodes)),
            "interruptions": [*job.interruptions, record],
            **failures.no_suspects(),
            **request_totals(job.spec),
            "allocations": [],
            "nodelist": "",
            "batch_host": "",
            "start_time": 0,
            "restart_count": job.restart_count + 1,
        }
        delay = st.config.controller.requeue_delay_s
        if delay > 0 or not_before > now:  # its reason: BeginTime (pending.settle)
            again["eligible_time"] = max(now + delay, not_before)
        if job.spec.requeue_expedite:
            again["admin_priority"] = again["priority"] = failures.expedite_priority(
                st.jobs[i] for i in st.index.pending if i in st.jobs
            )
        ch.transition(job, "requeued", cause=cause, now=now, detail=detail[:512], **again)
        if hold != pb.HOLD_NONE:
            ch.transition(job, "held", cause=cause, now=now, hold=hold, priority=0)
        st.enqueue(job)  # its reason: Resources until a pass says (pending.settle)

    def node_failed(
        self,
        ch: Change,
        job: pb.Job,
        node: NodeRecord,
        why: str,
        cause: str,
        usage: pb.JobUsage | None = None,
    ) -> None:
        """The job lost its copy on ``node``: kill every part of it, requeue it or NODE_FAIL
        (with ``usage``, if its node reported it).

        A job being stopped to be requeued (scontrol requeue[hold]) is requeued as asked,
        with its hold, whatever its --requeue says: the run ends REQUEUED."""
        asked = job.requeue_on_exit
        hold = asked_hold(job)
        fields: js.Fields = dict(NO_REQUEUE)
        if usage is not None:
            fields["usage"] = usage
        if job.HasField("held_end"):  # its script ended before the verdict: its usage
            fields["usage"] = job.held_end.usage
        if job.state == js.COMPLETING:  # cancelled before: nothing more to wait for
            self.end_allocation(
                ch, job, js.CANCELLED, cause=cause, exit_code=0, exit_signal=9, **fields
            )
            return
        if not asked and not failures.may_requeue(job, self.state.config.controller.job_requeue):
            log.warning("job ended by a node failure", job_id=job.job_id, node=node.name)
            self.end_allocation(
                ch,
                job,
                js.NODE_FAIL,
                cause=cause,
                exit_code=0,
                exit_signal=9,
                **{**fields, "reason": "NodeDown"},
            )
            return
        # every part of it goes at once (no KillWait): the failed node too, since one an
        # operator took DOWN still answers (a dead one does not: fencing finishes it)
        for part, kill in self.outbox.terminate_everywhere(job):
            kill.kill_wait_s = 0.0
            kill.node_failure = True
            ch.signal(part, kill)
        self.end_running_steps(ch, job, js.NODE_FAIL)
        if node.name not in job.failed_nodes:
            fields["failed_nodes"] = [*job.failed_nodes, node.name]
        log.warning("job requeued after a node failure", job_id=job.job_id, node=node.name)
        run_state = pb.JOB_STATE_REQUEUED if asked else js.NODE_FAIL
        if asked:  # it was being stopped for this (scontrol requeue, a drain)
            why_kind = ettr.cause_of(why, disruption=job.disruption) if job.disruption else ""
        elif cause.startswith("rpc:UpdateNode"):  # an operator's State=DOWN
            why_kind = "operator"
        else:
            why_kind = ettr.cause_of(why)
        # another node srun lost and not judged yet may still run the old ranks, until
        # its fence guard kills them (before timeout_s from the loss): not again before
        timeout = self.state.config.heartbeat.timeout_s
        others = [s.since + timeout for s in job.suspect_nodes if s.node != node.name]
        self.requeue(
            ch,
            job,
            cause=cause,
            detail=why,
            run_state=run_state,
            hold=hold,
            not_before=max(others, default=0.0),
            interruption=why_kind or "operator",
            checkpoint_time=job.held_end.checkpoint_time if job.HasField("held_end") else 0.0,
            **fields,
        )


def interruption_record(
    job: pb.Job, cause: str, now: float, checkpoint_time: float, detail: str
) -> pb.Interruption:
    """The run of ``job`` ending now in a requeue, as ETTR counts it (corral/ettr.py)."""
    ended = max(now, job.start_time)
    return pb.Interruption(
        cause=cause,
        time=ended,
        run_start=job.start_time,
        checkpoint_time=checkpoint_time,
        lost_s=ettr.lost_work(job.start_time, checkpoint_time, ended) if job.start_time else 0.0,
        detail=detail[:200],
    )


def previous_run(job: pb.Job, failed: Iterable[str]) -> js.Fields:
    """What the next run of a requeued ``job`` is told of this one (its size), and the
    nodes an elastic requeue prefers: this run's healthy ones, its batch host first."""
    lost = set(failed)
    names = [a.node for a in job.allocations]
    if job.batch_host in names:
        names.remove(job.batch_host)
        names.insert(0, job.batch_host)
    return {
        "previous_nodes": [n for n in names if n not in lost],
        "previous_num_nodes": len(job.allocations),
        "previous_num_tasks": sum(tasks_per_node(job)) if job.allocations else 0,
    }


# a requeue asked for (``requeue_when_gone``) forgotten: set with the change that ends it
NO_REQUEUE: js.Fields = {
    "requeue_on_exit": False,
    "requeue_hold": pb.HOLD_NONE,
    "disruption": "",
    "disruption_deadline": 0.0,
}


def requeue_when_gone(hold: int = pb.HOLD_NONE) -> js.Fields:
    """The fields that ask for ``job`` to be requeued (held: ``hold``) when its node
    reports it gone, set with the change that tells its nodes to stop it. Kept in the
    job itself, so it is durable with that change and a ctld restarted meanwhile still
    requeues it."""
    return {"requeue_on_exit": True, "requeue_hold": hold}


def asked_hold(job: pb.Job) -> int:
    """The hold a requeue asked for gives the job (HOLD_NONE if none was asked)."""
    return int(job.requeue_hold) if job.requeue_on_exit else pb.HOLD_NONE


def _exit(code: int, sig: int) -> tuple[int, int]:
    """An exit code and signal as a job keeps them."""
    return max(0, min(code, 255)), max(0, min(sig, 64))
