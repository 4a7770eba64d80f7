"""What a node reports of its jobs, applied to them: exits, launch failures, idle GPUs,
the end of a step's tasks, a task stalled on a node other than the batch host.
``endings`` decides what an end means for the job; repeats of a report change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord
from ctld.ops.endings import NO_REQUEUE, Endings, requeue_when_gone
from ctld.ops.step_ends import StepEnds
from ctld.ops.suspects import Suspects

Update = pb.JobStatusUpdate
END_PROLOG_FAILED = Update.END_PROLOG_FAILED
log = structlog.get_logger("ctld")
#: NodeOps.drain: a prolog error drains the node the job was to start on
Drain = Callable[..., None]


class JobReports:
    def __init__(
        self,
        state: State,
        endings: Endings,
        outbox: Outbox,
        steps: StepEnds,
        suspects: Suspects,
        drain: Drain,
    ) -> None:
        self.state = state
        self.endings = endings
        self.outbox = outbox
        self.steps = steps
        self.suspects = suspects
        self.drain = drain

    async def report_status(self, req: pb.ReportJobStatusRequest) -> None:
        """Apply what a node reports about its jobs; repeats of a report change nothing."""
        await self.apply_updates(self.state.node(req.node), req.updates)

    async def apply_updates(self, node: NodeRecord, updates: Iterable[pb.JobStatusUpdate]) -> None:
        async with Change(self.state, self.outbox) as ch:
            for upd in updates:
                self._apply_update(ch, node, upd)

    def _apply_update(self, ch: Change, node: NodeRecord, upd: pb.JobStatusUpdate) -> None:
        st = self.state
        job = st.jobs.get(upd.job_id)
        if job is not None and upd.kind == Update.KIND_STEP_ENDED:
            self.steps.part_ended(ch, job, node, upd)
            self.suspects.part_ended(ch, job, node, upd)
            return
        if job is not None and _stalled_elsewhere(job, node, upd):
            # a hung srun task on a node other than the batch host: requeue like a failure
            if job.state == js.RUNNING and not failures.stale_report(job, upd):
                cause = f"node:{node.name} report"
                self.endings.node_failed(ch, job, node, upd.detail or "stalled", cause)
            return
        if job is None or job.state not in js.ON_NODE or job.batch_host != node.name:
            return  # already finished (a retried report) or not this node's job
        if failures.stale_report(job, upd):
            return  # about a copy from before a requeue
        cause = f"node:{node.name} report"
        try:
            if job.state == js.COMPLETING and upd.kind in (
                Update.KIND_EXITED,
                Update.KIND_LAUNCH_FAILED,
            ):
                # cancelled meanwhile: however it ended on the node, it ends CANCELLED
                if upd.kind == Update.KIND_LAUNCH_FAILED and upd.end_reason == END_PROLOG_FAILED:
                    self.drain(ch, node, "Prolog error", upd.time or st.clock(), cause=cause)
                ended = upd if upd.kind == Update.KIND_EXITED else Update(time=upd.time)
                self.endings.finish(ch, job, ended, cause, **NO_REQUEUE)
            elif upd.kind == Update.KIND_EXITED and upd.end_reason in (
                Update.END_NODE_FAIL,
                Update.END_STALLED,
            ):
                # (a step's stall report has none of the job's usage)
                usage = upd.usage if upd.HasField("usage") else None
                why = upd.detail or "lost on its node"
                self.endings.node_failed(ch, job, node, why, cause, usage=usage)
            elif upd.kind == Update.KIND_EXITED:
                if not self.endings.hold_end(ch, job, upd, cause):  # a node is suspect
                    self.endings.exited(ch, job, upd, cause)
            elif upd.kind == Update.KIND_LAUNCH_FAILED and upd.end_reason == END_PROLOG_FAILED:
                # Slurm's rule: the node is suspect, the job is not; it runs elsewhere
                self.endings.requeue(ch, job, cause=cause, detail=upd.detail[:512])
                self.drain(ch, node, "Prolog error", upd.time or st.clock(), cause=cause)
            elif upd.kind == Update.KIND_LAUNCH_FAILED:
                ch.transition(
                    job,
                    "launch_failed",
                    cause=cause,
                    detail=upd.detail[:1024],
                    end_time=upd.time or st.clock(),
                    exit_code=1,
                    reason=f"launch failed: {upd.detail}"[:200],
                )
                st.release(job)
            elif upd.kind == Update.KIND_IDLE_GPUS:
                self._idle_gpus(ch, job, upd, cause)
        except InvalidTransition as exc:
            # one impossible report must not block the node's others (nor re-registration)
            log.error("node report not applicable", node=node.name, error=str(exc))

    def _idle_gpus(self, ch: Change, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> None:
        """Flag (or clear) a job whose GPUs sit idle; cancel or requeue it if so configured."""
        st = self.state
        policy = st.config.idle_gpus
        if upd.time <= 0:
            if not job.idle_gpus_since:
                return
            busy: js.Fields = {"reason": "None"} if job.reason == "IdleGPUs" else {}
            ch.update(job, cause=cause, detail="GPUs busy again", idle_gpus_since=0, **busy)
            return
        if job.idle_gpus_since:
            return  # a repeat
        detail = f"GPUs under {policy.threshold_pct:g}% since {upd.time:.0f}"
        # squeue %r and scontrol's Reason= show the flag
        fields: js.Fields = {"idle_gpus_since": upd.time, "reason": "IdleGPUs"}
        # it stays RUNNING while the node stops it; its exit report requeues it
        requeue = job.state == js.RUNNING and policy.action == "requeue"
        if requeue:
            fields.update(requeue_when_gone())
        ch.update(job, cause=cause, detail="idle " + detail, **fields)
        log.warning("idle GPUs", job_id=job.job_id, action=policy.action, since=upd.time)
        if job.state == js.RUNNING and policy.action == "cancel":
            self.endings.cancel(ch, job, "policy:idle_gpus cancel", st.clock())
        elif requeue:
            ch.signal(*self.outbox.terminate_batch(job))


def _stalled_elsewhere(job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate) -> bool:
    """A stall report from a node of the job that is not its batch host (srun tasks)."""
    return (
        upd.kind == Update.KIND_EXITED
        and upd.end_reason == Update.END_STALLED
        and job.batch_host != node.name
        and failures.on_node(job, node.name)
    )
