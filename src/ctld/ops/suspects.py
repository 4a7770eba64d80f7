"""A node srun lost mid-step: the job's end waits for that node's verdict.

srun's task stream to a node closing before that node's exits came means its noded
died (killed, crashed, restarted), or the stream broke while it lives. srun kills the
other ranks, so the batch script ends non-zero at once; that exit must not become the
job's outcome if the node failed. srun tells ctld (StepNodeLost) before it exits, so
ctld keeps the node as *suspect* in the job (durable, with the noded instance
registered then) and holds the job's end report (``Endings.hold_end``) until the node
is judged:

- DOWN (silent past ``heartbeat.timeout_s``; its fence guard killed the job's
  processes there an interval before): ``node_down`` requeues the job, or ends it
  NODE_FAIL, as for any node failure;
- registered by another noded instance (a restart: the new noded killed what the old
  one left before it registered): the same, at once;
- alive: its noded reports the step's tasks there gone (it ends a step whose srun went
  away), or it heartbeats on for ``timeout_s`` after the report without a restart:
  the suspicion is dropped and the held end applies as reported.

A requeue never comes before the old run's processes on the node are known gone, so
"never two copies" still holds (docs/reliability.md).
"""

from __future__ import annotations

import structlog

from corral.errors import JobStateConflict
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.authz import Policy
from ctld.model.nodes import NodeRecord
from ctld.ops.endings import Endings
from ctld.ops.step_ends import StepEnds, find_step

log = structlog.get_logger("ctld")


class Suspects:
    def __init__(
        self, state: State, policy: Policy, endings: Endings, outbox: Outbox, steps: StepEnds
    ) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        self.steps = steps
        self.watched: set[int] | None = None  # jobs with a suspect node (None: not read yet)

    async def node_lost(self, who: Identity, req: pb.StepNodeLostRequest) -> None:
        """srun lost ``req.node``'s stream before its exits came (StepNodeLost)."""
        st = self.state
        job = st.job(req.job_id)
        self.policy.check_job(who, job, "report a node of")
        step = find_step(job, req.step_id)
        if req.node not in {n.node for n in step.nodes}:
            raise JobStateConflict(f"Step {job.job_id}.{step.step_id} has no tasks on {req.node}")
        node = st.nodes.get(req.node)
        if (
            node is None
            or node.down  # judged already: node_down settled the job
            or job.state != js.RUNNING
            or req.run != job.restart_count  # an earlier run's srun
            or step.state != js.RUNNING  # every node said its part ended, or scancel
            or failures.suspicion(job, node.name) is not None  # a repeat
            or self.steps.part_done(job, step, node.name)  # its noded said so: alive
        ):
            return
        detail = req.detail[:256] or "the connection to its noded was lost"
        cause = f"rpc:StepNodeLost user={who.user}"
        if node.restarted_at > step.start_time:  # a new noded registered since: judged
            async with Change(st, self.outbox) as ch:
                self.endings.node_failed(ch, job, node, _restarted(node, job, step.step_id), cause)
            return
        suspect = pb.SuspectNode(
            node=node.name,
            step_id=step.step_id,
            since=st.clock(),
            instance=node.instance,
            detail=detail,
        )
        self._watch().add(job.job_id)
        log.warning(
            "srun lost a node of a step: the job's end waits for its verdict",
            job_id=job.job_id,
            step_id=step.step_id,
            node=node.name,
            detail=detail,
        )
        async with Change(st, self.outbox, wake=False) as ch:
            ch.update(
                job,
                cause=cause,
                detail=f"srun lost node {node.name} in step {step.step_id} ({detail}): "
                "the job's end waits for the node's verdict",
                suspect_nodes=[*job.suspect_nodes, suspect],
            )

    def part_ended(
        self, ch: Change, job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate
    ) -> None:
        """The suspect node's noded reports the step's tasks there gone: it is alive, and
        they ended with srun's stream (it kills a step whose srun went away)."""
        sus = failures.suspicion(job, node.name)
        if sus is not None and upd.step_id == sus.step_id:
            self._alive(ch, job, node.name, f"node:{node.name} report", "its step part ended")

    def registered(self, ch: Change, node: NodeRecord, instance: str, running: set[int]) -> None:
        """A suspect node registers. Another noded than the one srun lost is a restart,
        whose recovery killed the old one's processes before registering: a node failure
        for the jobs that suspect it. The same noded registering again is alive."""
        st = self.state
        for job_id in sorted(node.job_ids):
            job = st.jobs.get(job_id)
            if job is None or job.state not in js.ON_NODE:
                continue
            sus = failures.suspicion(job, node.name)
            if sus is None:
                continue
            if sus.instance and sus.instance == instance:
                continue  # the noded that ran the step: alive (the stream broke)
            if node.took_over and job_id in running:
                continue  # a new noded took the job over: alive (its srun resumes)
            if not sus.instance and job_id in running:
                continue  # which noded srun lost is not known, but this one runs it
            log.warning("suspect node restarted: a node failure", job_id=job_id, node=node.name)
            why = _restarted(node, job, sus.step_id)
            self.endings.node_failed(ch, job, node, why, f"node:{node.name} registered")

    def expire(self, ch: Change) -> None:
        """Suspect nodes that still heartbeat ``timeout_s`` after srun lost them (no
        restart meanwhile, or their registration would have judged them) are alive."""
        st = self.state
        timeout = st.config.heartbeat.timeout_s
        watched = self._watch()
        for job_id in sorted(watched):
            job = st.jobs.get(job_id)
            if job is None or job.state not in js.ON_NODE or not job.suspect_nodes:
                watched.discard(job_id)
                continue
            for sus in list(job.suspect_nodes):
                node = st.nodes.get(sus.node)
                if node is None or node.down or not node.registered:
                    continue  # DOWN settles it; an unregistered node registers first
                if node.last_heartbeat - sus.since > timeout:
                    self._alive(ch, job, sus.node, "monitor:heartbeat", "it heartbeats on")

    def _alive(self, ch: Change, job: pb.Job, node: str, cause: str, why: str) -> None:
        """``node`` is judged alive: the job's suspicion of it goes; with none left, the
        end held meanwhile applies as reported."""
        keep = [s for s in job.suspect_nodes if s.node != node]
        log.info("suspect node alive", job_id=job.job_id, node=node, why=why)
        held: pb.JobStatusUpdate | None = None
        if not keep and job.HasField("held_end"):
            held = pb.JobStatusUpdate()
            held.CopyFrom(job.held_end)
        ch.update(
            job,
            cause=cause,
            detail=f"node {node} judged alive ({why}): no failure",
            suspect_nodes=keep,
            **({"held_end": None} if held is not None else {}),
        )
        if held is not None:
            self.endings.exited(ch, job, held, cause)

    def _watch(self) -> set[int]:
        """The jobs to look at; read from the jobs once (after a restart: the store's)."""
        if self.watched is None:
            jobs = self.state.on_node()
            self.watched = {j.job_id for j in jobs if j.suspect_nodes}
        return self.watched


def _restarted(node: NodeRecord, job: pb.Job, step_id: int) -> str:
    return (
        f"noded on {node.name} restarted under step {job.job_id}.{step_id}: "
        "the step's tasks there were lost"
    )
