"""What nodes tell ctld: registration, heartbeats, job reports, faults; and drains.

A node's report is applied to its jobs here (exits, launch failures, idle GPUs, the
end of a step's tasks); ``endings`` decides what an end means for the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import structlog

from corral.clock import Clock, SystemClock
from corral.errors import InvalidNodeName, InvalidRequest, InvalidTransition
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change, liveness
from ctld.core.outbox import Outbox
from ctld.core.state import State, user_name
from ctld.fleet.liveness import Verdicts
from ctld.fleet.loopwatch import LoopWatch
from ctld.jobs.disruptions import Disruptions
from ctld.jobs.endings import NO_REQUEUE, Endings, requeue_when_gone
from ctld.jobs.step_ops import StepOps
from ctld.jobs.suspects import Suspects
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.authz import Policy
from ctld.model.gpu_samples import holders
from ctld.model.nodes import POWER_ON, POWERING_DOWN, NodeRecord

Update = pb.JobStatusUpdate
END_PROLOG_FAILED = Update.END_PROLOG_FAILED
log = structlog.get_logger("ctld")


class NodeReports:
    def __init__(
        self,
        state: State,
        policy: Policy,
        endings: Endings,
        outbox: Outbox,
        steps: StepOps,
        suspects: Suspects,
    ) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        self.steps = steps
        self.suspects = suspects
        self._maint_warned: set[tuple[int, int, str]] = set()  # (job, run, reservation)
        self.disruptions = Disruptions(state, outbox)  # drains and maintenance warn first
        self.watch = LoopWatch()  # ctld's own stalls are not the nodes' silence
        self.verdicts = Verdicts(state)  # most nodes silent at once: ctld holds

    async def register_node(self, req: pb.RegisterNodeRequest) -> NodeRecord:
        st = self.state
        node = st.node(req.name)
        now = st.clock()
        if not req.address or len(req.address) > 256:
            raise InvalidRequest("a node must register the address of its agent")
        if len(req.agent_address) > 256 or len(req.stream_address) > 256:
            raise InvalidRequest("agent address too long")
        features = req.resources.features
        if len(features) > 64 or any(len(f) > 64 or not f.isprintable() for f in features):
            raise InvalidRequest("node features: at most 64, each a printable name of 64")
        if node.power == POWERING_DOWN:  # its suspend program is stopping it
            raise InvalidRequest(f"node {node.name} is powering down")
        async with Change(st, wake=False) as ch:  # it wakes the scheduler below
            ch.node(
                node,
                "registered",
                cause=f"node:{req.name} RegisterNode",
                now=now,
                address=req.address,
                agent_address=req.agent_address,
                stream_address=req.stream_address,
                instance=req.instance,
                took_over=req.took_over,
                resources=req.resources,
                boot_time=req.boot_time,
                version=req.version,
                os=req.os,
            )
        node.last_heartbeat, node.deaf_mark = now, self.watch.tick()
        node.heard_deaf_s = 0.0
        self.verdicts.peers_changed()  # its address, and its being there
        log.info(
            "node registered",
            node=node.name,
            address=node.address,
            cpus=node.resources.cpus,
            gpus=len(node.resources.gpus),
            running=len(req.running_job_ids),
        )
        await self._apply_updates(node, req.unreported)
        await self.node_faults(node, req.health)
        async with Change(st, self.outbox) as ch:  # a restart srun saw coming
            self.suspects.registered(ch, node, req.instance, set(req.running_job_ids))
        await self._reconcile(node, set(req.running_job_ids), now)
        self._stop_again(node, set(req.running_job_ids))
        # fencing: what it runs beyond what it may keep is killed before it gets work
        fencing = bool(set(req.running_job_ids) - set(self.jobs_kept_by(node.name)))
        if fencing != node.fencing:
            cause = f"node:{node.name} RegisterNode"
            liveness(st, node, "fencing" if fencing else "fenced", cause=cause)
        if node.fencing:
            log.warning("node back with jobs it may not keep: fencing", node=node.name)
        st.wake()
        return node

    def jobs_kept_by(self, name: str) -> list[int]:
        """The jobs a registering node may keep running (it kills every other)."""
        st = self.state
        node = st.nodes.get(name)
        jobs = [st.jobs[i] for i in sorted(node.job_ids) if i in st.jobs] if node else []
        return failures.keep_for(name, jobs)

    async def _reconcile(self, node: NodeRecord, running: set[int], since: float) -> None:
        """Settle jobs ctld places on ``node`` that the node, registering, does not run.

        With the node's unreported updates already applied, such a job never reached the
        node (ctld died between committing RUNNING and dispatching it) or the node lost
        it (noded restarted). A launch still in flight is not missing: the node's list
        was taken before it arrived; nor is a job started after ``since`` (the
        registration): a pass that ran while the registration awaited its commit placed
        it there.
        """
        st = self.state
        cause = f"node:{node.name} registered without it"
        async with Change(st, self.outbox) as ch:
            # only jobs holding this node can be its batch jobs: a registration storm after
            # a restart then costs O(jobs on the node) per node, not O(all jobs) each
            for job_id in sorted(node.job_ids):
                job = st.jobs.get(job_id)
                if (
                    job is None
                    or job.state not in js.ON_NODE
                    or job.batch_host != node.name
                    or job.job_id in running
                    or job.job_id in st.index.launching
                    or job.start_time > since
                    or job.spec.allocation_only  # no batch step on any node
                    or job.HasField("held_end")  # it ended here: its end waits (suspects)
                ):
                    continue
                if job.state == js.COMPLETING:  # cancelled, and nothing is left to stop
                    self.endings.finish(ch, job, pb.JobStatusUpdate(job_id=job.job_id), cause)
                else:
                    log.warning("job missing on its node", job_id=job.job_id, node=node.name)
                    self.endings.node_failed(
                        ch, job, node, f"node {node.name} does not run it", cause
                    )

    def _stop_again(self, node: NodeRecord, running: set[int]) -> None:
        """Kills asked for before (a cancel, a requeue) that a restarted ctld cannot know
        were delivered: sent again to a registering node that still runs the job."""
        st = self.state
        again = []
        for job_id in sorted(node.job_ids & running):
            job = st.jobs.get(job_id)
            if job is not None and (
                job.state == js.COMPLETING
                or (job.state == js.RUNNING and job.requeue_on_exit and not job.disruption_deadline)
            ):
                again.append((node, self.outbox.terminate_request(job)))
        if again:
            log.info("kills sent again", node=node.name, jobs=[r.job_id for _, r in again])
            self.outbox.send(again)

    def heartbeat(self, req: pb.HeartbeatRequest) -> bool:
        """Record a heartbeat; False means ctld wants the node to register again."""
        node = self.state.node(req.name)
        if not node.registered or (node.down and not node.admin_down):
            return False  # a node back from DOWN registers again, and is fenced then
        node.last_heartbeat, node.deaf_mark = self.state.clock(), self.watch.tick()
        node.heard_deaf_s = req.deaf_s
        if req.gpus:  # each GPU now, and the series of the jobs on them (the web page)
            st = self.state
            on_node = (st.jobs[j] for j in node.job_ids if j in st.jobs)
            st.gpu_samples.record(node.name, req.gpus, holders(node.name, on_node), st.clock())
            st.gpu_samples.prune(st.jobs.__contains__)
        if node.late:
            liveness(self.state, node, "heard", cause=f"node:{node.name} Heartbeat")
            log.info("node responding again", node=node.name)
            self.state.wake()
        if node.fencing and set(req.running_job_ids) <= set(self.jobs_kept_by(node.name)):
            liveness(self.state, node, "fenced", cause=f"node:{node.name} Heartbeat")
            log.info("node fenced: only its own jobs run there", node=node.name)
            self.state.wake()
        return True

    async def run_monitor(self) -> None:
        # on the real clock only: a test's ManualClock never stalls
        watching = asyncio.create_task(self.watch.run()) if _real(self.state.clock) else None
        try:
            while True:  # check first: a clock already past a deadline is acted on at once
                await self.steps.enforce_allocation_limits()
                await self.check_heartbeats()
                await self.warn_maintenance()
                await self.disruptions.check()
                hb = self.state.config.heartbeat  # as it is now: a reconfigure changes it
                await self.state.clock.sleep(min(hb.interval_s / 2, hb.timeout_s / 4))
        finally:
            if watching is not None:
                watching.cancel()

    async def check_heartbeats(self) -> None:
        """Late nodes get NOT_RESPONDING; silent ones past the timeout go DOWN (jobs requeued).

        A node not heard of since ctld started is timed from the start, so a node that
        died while ctld was away goes DOWN too.
        """
        st = self.state
        hb = st.config.heartbeat
        now = st.clock()
        deaf = self.watch.tick()  # a stall just ended is counted before anyone is judged
        since = self.verdicts.check(now)  # most nodes silent: nobody is DOWN for it
        for node in st.nodes.values():
            if node.down or node.power != POWER_ON:  # power saving judges those (power.py)
                self.verdicts.forget(node.name)
                continue
            state = failures.liveness(node, now, hb, since, deaf - node.deaf_mark)
            if state is failures.Liveness.DEAD and self.verdicts.holding:
                # NOT_RESPONDING at most, its jobs untouched
                state = failures.Liveness.LATE if node.registered else failures.Liveness.OK
            if state is failures.Liveness.DEAD:
                log.warning(
                    "node not responding: DOWN",
                    node=node.name,
                    silent_s=round(now - (node.last_heartbeat or st.start_time), 1),
                )
                await self.node_down(node, "heartbeat_lost", cause="monitor:heartbeat")
            elif state is failures.Liveness.LATE and not node.late:
                liveness(st, node, "late", cause="monitor:heartbeat")
                log.warning("node heartbeat late", node=node.name)
                st.wake()
        # after the DOWNs: a suspect node that is not DOWN by now is alive
        async with Change(st, self.outbox) as ch:
            self.suspects.expire(ch)

    async def node_down(
        self,
        node: NodeRecord,
        event: str,
        *,
        cause: str,
        reason: str = failures.NOT_RESPONDING,
        who: Identity | None = None,
    ) -> None:
        """Declare ``node`` DOWN (``event``: its heartbeat lost, or an operator's DOWN with
        ``reason``): every job on it is stopped everywhere, requeued or failed."""
        st = self.state
        async with Change(st, self.outbox) as ch:
            user, uid = (who.user, who.uid) if who is not None else ("root", 0)
            ch.node(node, event, cause=cause, reason=reason, user=user, uid=uid)
            for job_id in sorted(node.job_ids):
                job = st.jobs.get(job_id)
                if job is None or not failures.on_node(job, node.name):
                    continue
                try:
                    self.endings.node_failed(
                        ch, job, node, f"node {node.name} DOWN: {reason}", cause
                    )
                except InvalidTransition as exc:
                    log.error("job on a DOWN node not settled", job_id=job_id, error=str(exc))
        st.wake()

    async def warn_maintenance(self) -> None:
        """Send a job's --signal before a maintenance reservation starts on its nodes."""
        st = self.state
        warnings = failures.maintenance_warnings(
            st.jobs.values(), st.reservations.views(), st.clock()
        )
        fresh = [
            (job, warn, resv)
            for job, warn, resv in warnings
            if (job.job_id, job.restart_count, resv) not in self._maint_warned
            # a checkpointing job is warned (and requeued) by the disruptions instead
            and self.disruptions.notice(job) is None
        ]
        if not fresh:
            return
        async with Change(st, self.outbox, wake=False) as ch:
            for job, warn, resv in fresh:
                self._maint_warned.add((job.job_id, job.restart_count, resv))
                log.info("signalling before maintenance", job_id=job.job_id, reservation=resv)
                req = pb.SignalJobRequest(
                    job_id=job.job_id,
                    signal=warn.signal,
                    batch_only=warn.batch_only,
                    run=job.restart_count,
                )
                for alloc in job.allocations:
                    node = st.nodes.get(alloc.node)
                    if node is not None and (alloc.node == job.batch_host or not warn.batch_only):
                        ch.signal(node, req)

    async def report_status(self, req: pb.ReportJobStatusRequest) -> None:
        """Apply what a node reports about its jobs; repeats of a report change nothing."""
        await self._apply_updates(self.state.node(req.node), req.updates)

    async def _apply_updates(self, node: NodeRecord, updates: Iterable[pb.JobStatusUpdate]) -> None:
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

    # ------------------------------------------------------------ node health

    def drain(
        self,
        ch: Change,
        node: NodeRecord,
        reason: str,
        when: float,
        *,
        cause: str,
        who: Identity | None = None,
    ) -> None:
        """Drain ``node`` (durably, with ``ch``); one already drained keeps its first
        reason, unless an operator (``who``) drains it again."""
        if node.drain and who is None:
            return
        uid = who.uid if who is not None else 0
        ch.node(node, "drained", cause=cause, now=when, reason=reason, user=user_name(uid), uid=uid)
        log.warning("node drained", node=node.name, reason=reason, by=node.reason_user)
        self.disruptions.drained(ch, node, reason, cause)
        self.state.wake()

    async def node_faults(self, node: NodeRecord, events: Iterable[pb.NodeHealthEvent]) -> None:
        """A node reports faults (GPU XID, ECC, lost GPU, epilog) or GPU health warnings:
        drain it; its checkpointing jobs are signalled and requeued (Disruptions.drained)."""
        # drain() wakes the scheduler
        async with Change(self.state, self.outbox, wake=False) as ch:
            for ev in events:
                log.error("node fault", node=node.name, reason=ev.reason, detail=ev.detail[:512])
                self.drain(
                    ch,
                    node,
                    ev.reason or "node fault",
                    ev.time or self.state.clock(),
                    # a warning (a degrading GPU) drains like a fault; the cause tells them apart
                    cause=f"node:{node.name} {'warning' if _is_warning(ev) else 'fault'}",
                )

    async def update_node(self, who: Identity, req: pb.UpdateNodeRequest) -> None:
        """scontrol update NodeName=... State=DRAIN|RESUME|UNDRAIN|DOWN Reason=...

        DRAIN lets running jobs finish and places nothing new; DOWN requeues (or fails)
        its jobs now; RESUME returns it: a DOWN node registers again first (and is
        fenced: what it still runs of jobs that moved is killed).
        """
        st = self.state
        self.policy.check_operator(who, "update node")
        state = req.state.upper()
        if state not in ("DRAIN", "RESUME", "UNDRAIN", "DOWN"):
            raise InvalidRequest(f"Invalid node state specified: {req.state}")
        if state == "DRAIN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DRAINING a node")
        if state == "DOWN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DOWNING a node")
        if not req.names:
            raise InvalidNodeName("No node name specified")
        nodes = [st.node(name) for name in req.names]
        now = st.clock()
        cause = f"rpc:UpdateNode {who.user}"
        ch = Change(st, self.outbox)
        for node in nodes:
            if state == "DOWN":
                await self.node_down(
                    node, "downed", cause=cause, reason=req.reason.strip(), who=who
                )
                continue
            if state == "RESUME" and node.down:
                ch.node(node, "resumed", cause=cause, now=now)
                log.info("node resumed from DOWN", node=node.name, by=who.user)
            if state == "DRAIN":
                self.drain(ch, node, req.reason.strip(), now, cause=cause, who=who)
            elif node.drain:
                ch.node(node, "undrained", cause=cause, now=now)
                log.info("node resumed", node=node.name, by=who.user)
        await ch.commit()
        st.wake()  # a resumed or drained node changes what can start


def _stalled_elsewhere(job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate) -> bool:
    """A stall report from a node of the job that is not its batch host (srun tasks)."""
    return (
        upd.kind == Update.KIND_EXITED
        and upd.end_reason == Update.END_STALLED
        and job.batch_host != node.name
        and failures.on_node(job, node.name)
    )


def _is_warning(ev: pb.NodeHealthEvent) -> bool:
    return ev.detail.startswith("warning:")  # noded's detail is "<kind>: <detail>"


def _real(clock: Clock) -> bool:
    return isinstance(clock, SystemClock)
