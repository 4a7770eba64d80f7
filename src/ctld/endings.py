"""How a job leaves its nodes: it ends, is cancelled, or goes back to the queue.

Shared by the operations that end jobs (a client's cancel, a node's exit report, an
allocation's release or time limit, a failed launch). Each function makes its part
of a ``Change`` (the transition and the signals it needs); the caller commits it.
"""

from __future__ import annotations

import structlog

from corral.errors import JobStateConflict
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.commit import Change
from ctld.outbox import Outbox
from ctld.state import State, fill_request_totals

Update = pb.JobStatusUpdate
log = structlog.get_logger("ctld")


class Endings:
    def __init__(self, state: State, outbox: Outbox) -> None:
        self.state = state
        self.outbox = outbox

    def cancel(self, ch: Change, job: pb.Job, cause: str, now: float) -> None:
        """Cancel ``job``: a pending one ends now, a running one is asked to stop."""
        if job.state == js.PENDING:
            ch.transition(job, "cancelled", cause=cause, now=now)
            job.end_time = now
            job.reason = "None"
            return
        if job.state == js.RUNNING and job.spec.allocation_only:
            # no batch step to wait for: the allocation ends now, its steps are killed
            self.end_allocation(ch, job, js.CANCELLED, cause=cause, exit_code=0, exit_signal=0)
            return
        if job.state == js.RUNNING:
            ch.transition(job, "cancel_requested", cause=cause, now=now)
            ch.signal_all(self.outbox.terminate_elsewhere(job))
            ch.signal(*self.outbox.terminate_batch(job))
            return
        raise JobStateConflict()

    def finish(self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> None:
        """The node reports the job's end: its final state, exit and usage."""
        now = self.state.clock()
        job.usage.CopyFrom(upd.usage)
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
        job.exit_code = max(0, min(upd.exit_code, 255))
        job.exit_signal = max(0, min(upd.exit_signal, 64))
        job.end_time = max(upd.time, job.start_time) if upd.time else now
        job.reason = {
            js.TIMEOUT: "TimeLimit",
            js.OUT_OF_MEMORY: "OutOfMemory",
            js.FAILED: "NonZeroExitCode" if upd.exit_code else "None",
        }.get(final, "None")
        ch.transition(
            job, "exited", cause=cause, to=final, detail=f"exit {job.exit_code}:{job.exit_signal}"
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

    def end_allocation(
        self, ch: Change, job: pb.Job, final: int, *, cause: str, exit_code: int, exit_signal: int
    ) -> None:
        """An allocation (salloc/srun) ends: released, timed out or cancelled."""
        job.exit_code = max(0, min(exit_code, 255))
        job.exit_signal = max(0, min(exit_signal, 64))
        job.end_time = self.state.clock()
        reasons: dict[int, str] = {js.TIMEOUT: "TimeLimit", js.FAILED: "NonZeroExitCode"}
        job.reason = reasons.get(final, "None")
        self.end_running_steps(ch, job, final)
        ch.signal_all(self.outbox.terminate_everywhere(job))
        ch.transition(
            job,
            "exited",
            cause=cause,
            to=final,
            detail=f"allocation released, exit {job.exit_code}:{job.exit_signal}",
        )
        self._ended(job)

    def _ended(self, job: pb.Job) -> None:
        self.state.release(job)
        self.state.ledger.add_finished(job)
        self.state.remember_run(job)

    def end_running_steps(self, ch: Change, job: pb.Job, final: int) -> None:
        """A job that ends ends its steps (their tasks die with it)."""
        for step in job.steps:
            if step.state == js.RUNNING:
                ch.end_step(
                    step, js.CANCELLED if final != js.TIMEOUT else js.TIMEOUT, self.state.clock()
                )

    def requeue(self, ch: Change, job: pb.Job, *, cause: str, detail: str) -> None:
        """Put a RUNNING job back in the queue; it keeps its age and counts a restart."""
        js.check(job, "requeued", cause)  # before anything changes: never half a requeue
        ch.end_run(job, pb.JOB_STATE_REQUEUED)
        self.state.release(job)
        del job.allocations[:]
        job.nodelist = job.batch_host = ""
        job.start_time = 0
        job.restart_count += 1
        ch.transition(job, "requeued", cause=cause, detail=detail[:512])
        fill_request_totals(job)
        self.state.enqueue(job)  # its reason: Resources until a pass says (pending.settle)
