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
from ctld import failures
from ctld import jobstate as js
from ctld.authz import Policy
from ctld.commit import Change
from ctld.endings import Endings, clear_requeue, requeue_when_gone
from ctld.gpu_samples import holders
from ctld.loopwatch import LoopWatch
from ctld.nodes import NodeRecord
from ctld.outbox import Outbox
from ctld.state import State, user_name
from ctld.step_ops import StepOps
from ctld.store import NodeDrain, Op
from ctld.suspects import Suspects

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
        self.watch = LoopWatch()  # ctld's own stalls are not the nodes' silence

    async def register_node(self, req: pb.RegisterNodeRequest) -> NodeRecord:
        st = self.state
        node = st.node(req.name)
        now = st.clock()
        if not req.address or len(req.address) > 256:
            raise InvalidRequest("a node must register the address of its agent")
        if len(req.agent_address) > 256 or len(req.stream_address) > 256:
            raise InvalidRequest("agent address too long")
        node.address = req.address
        node.agent_address = req.agent_address
        node.stream_address = req.stream_address
        if node.instance and req.instance != node.instance:
            node.restarted_at = now  # it killed what its predecessor ran (noded/spool.py)
        node.instance = req.instance
        node.resources = req.resources
        node.boot_time, node.version, node.os = req.boot_time, req.version, req.os
        node.registered = True
        node.responding_again()
        node.last_heartbeat, node.deaf_mark = now, self.watch.tick()
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
        await self._reconcile(node, set(req.running_job_ids))
        self._stop_again(node, set(req.running_job_ids))
        # fencing: what it runs beyond what it may keep is killed before it gets work
        node.fencing = bool(set(req.running_job_ids) - set(self.jobs_kept_by(node.name)))
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

    async def _reconcile(self, node: NodeRecord, running: set[int]) -> None:
        """Settle jobs ctld places on ``node`` that the node, registering, does not run.

        With the node's unreported updates already applied, such a job never reached the
        node (ctld died between committing RUNNING and dispatching it) or the node lost
        it (noded restarted). A launch still in flight is not missing: the node's list
        was taken before it arrived.
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
                    or job.job_id in st.launching
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
                job.state == js.COMPLETING or (job.state == js.RUNNING and job.requeue_on_exit)
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
        if req.gpus:  # each GPU now, and the series of the jobs on them (the web page)
            st = self.state
            on_node = (st.jobs[j] for j in node.job_ids if j in st.jobs)
            st.gpu_samples.record(node.name, req.gpus, holders(node.name, on_node), st.clock())
            st.gpu_samples.prune(st.jobs.__contains__)
        if node.late:
            node.late = False
            log.info("node responding again", node=node.name)
            self.state.wake()
        if node.fencing and set(req.running_job_ids) <= set(self.jobs_kept_by(node.name)):
            node.fencing = False
            log.info("node fenced: only its own jobs run there", node=node.name)
            self.state.wake()
        return True

    async def run_monitor(self) -> None:
        hb = self.state.config.heartbeat
        # on the real clock only: a test's ManualClock never stalls
        watching = asyncio.create_task(self.watch.run()) if _real(self.state.clock) else None
        try:
            while True:  # check first: a clock already past a deadline is acted on at once
                await self.steps.enforce_allocation_limits()
                await self.check_heartbeats()
                await self.warn_maintenance()
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
        for node in st.nodes.values():
            if node.down:
                continue
            state = failures.liveness(node, now, hb, st.start_time, deaf - node.deaf_mark)
            if state is failures.Liveness.DEAD:
                log.warning(
                    "node not responding: DOWN",
                    node=node.name,
                    silent_s=round(now - (node.last_heartbeat or st.start_time), 1),
                )
                await self.node_down(node, failures.NOT_RESPONDING, cause="monitor:heartbeat")
            elif state is failures.Liveness.LATE and not node.late:
                node.late = True
                log.warning("node heartbeat late", node=node.name)
                st.wake()
        # after the DOWNs: a suspect node that is not DOWN by now is alive
        async with Change(st, self.outbox) as ch:
            self.suspects.expire(ch)

    async def node_down(self, node: NodeRecord, reason: str, *, cause: str) -> None:
        """Declare ``node`` DOWN: every job on it is stopped everywhere, requeued or failed."""
        st = self.state
        node.not_responding(st.clock(), reason)
        async with Change(st, self.outbox) as ch:
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
                clear_requeue(job)
                if upd.kind == Update.KIND_LAUNCH_FAILED and upd.end_reason == END_PROLOG_FAILED:
                    ch.put(*self.drain(node, "Prolog error", upd.time or st.clock()))
                ended = upd if upd.kind == Update.KIND_EXITED else Update(time=upd.time)
                self.endings.finish(ch, job, ended, cause)
            elif upd.kind == Update.KIND_EXITED and upd.end_reason in (
                Update.END_NODE_FAIL,
                Update.END_STALLED,
            ):
                if upd.HasField("usage"):  # a step's stall report has none of the job's
                    job.usage.CopyFrom(upd.usage)
                self.endings.node_failed(ch, job, node, upd.detail or "lost on its node", cause)
            elif upd.kind == Update.KIND_EXITED:
                if not self.endings.hold_end(ch, job, upd, cause):  # a node is suspect
                    self.endings.exited(ch, job, upd, cause)
            elif upd.kind == Update.KIND_LAUNCH_FAILED and upd.end_reason == END_PROLOG_FAILED:
                # Slurm's rule: the node is suspect, the job is not; it runs elsewhere
                self.endings.requeue(ch, job, cause=cause, detail=upd.detail[:512])
                ch.put(*self.drain(node, "Prolog error", upd.time or st.clock()))
            elif upd.kind == Update.KIND_LAUNCH_FAILED:
                ch.transition(job, "launch_failed", cause=cause, detail=upd.detail[:1024])
                job.end_time = upd.time or st.clock()
                job.exit_code = 1
                job.reason = f"launch failed: {upd.detail}"[:200]
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
            job.idle_gpus_since = 0
            if job.reason == "IdleGPUs":
                job.reason = "None"
            ch.transition(job, "updated", cause=cause, detail="GPUs busy again")
            return
        if job.idle_gpus_since:
            return  # a repeat
        job.idle_gpus_since = upd.time
        job.reason = "IdleGPUs"  # squeue %r and scontrol's Reason= show the flag
        detail = f"GPUs under {policy.threshold_pct:g}% since {upd.time:.0f}"
        ch.transition(job, "updated", cause=cause, detail="idle " + detail)
        log.warning("idle GPUs", job_id=job.job_id, action=policy.action, since=upd.time)
        if job.state == js.RUNNING and policy.action == "cancel":
            self.endings.cancel(ch, job, "policy:idle_gpus cancel", st.clock())
        elif job.state == js.RUNNING and policy.action == "requeue":
            # it stays RUNNING while the node stops it; its exit report requeues it
            requeue_when_gone(job)
            ch.signal(*self.outbox.terminate_batch(job))

    # ------------------------------------------------------------ node health

    def drain(self, node: NodeRecord, reason: str, when: float, uid: int = 0) -> list[Op]:
        """Drain ``node`` (durably); a node already drained keeps its first reason."""
        if node.drain:
            return []
        node.drain = True
        user = user_name(uid)
        node.set_reason(reason[:256], when, user=user, uid=uid)
        log.warning("node drained", node=node.name, reason=reason, by=user)
        self.state.wake()
        return [Op(drains_put=[NodeDrain(node.name, node.reason, when, uid)])]

    async def node_faults(self, node: NodeRecord, events: Iterable[pb.NodeHealthEvent]) -> None:
        """A node reports faults (GPU XID, ECC, lost GPU, epilog): drain it."""
        async with Change(self.state, wake=False) as ch:  # drain() wakes the scheduler
            for ev in events:
                log.error("node fault", node=node.name, reason=ev.reason, detail=ev.detail[:512])
                ch.put(*self.drain(node, ev.reason or "node fault", ev.time or self.state.clock()))

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
        ch = Change(st)
        for node in nodes:
            if state == "DOWN":
                await self.node_down(node, req.reason.strip(), cause=f"rpc:UpdateNode {who.user}")
                node.admin_down = True
                node.set_reason(req.reason.strip()[:256], now, user=who.user, uid=who.uid)
                # durable: a ctld restart must not bring it back up by itself
                ch.put(Op(downs_put=[NodeDrain(node.name, node.reason, now, who.uid)]))
                continue
            if state == "RESUME" and node.down:
                if node.admin_down:
                    ch.put(Op(downs_delete=[node.name]))
                node.down = node.admin_down = False
                node.registered = False  # it registers again, and is fenced then
                if not node.drain:
                    node.set_reason("", 0.0, user="")
                log.info("node resumed from DOWN", node=node.name, by=who.user)
            if state == "DRAIN":
                if node.drain:  # an operator's drain replaces the reason
                    node.drain = False
                ch.put(*self.drain(node, req.reason.strip(), now, who.uid))
            elif node.drain:
                node.drain = False
                node.set_reason("", 0.0, user="")
                if node.registered and not node.responding:
                    node.set_reason("Not responding", now)
                ch.put(Op(drains_delete=[node.name]))
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


def _real(clock: Clock) -> bool:
    return isinstance(clock, SystemClock)
