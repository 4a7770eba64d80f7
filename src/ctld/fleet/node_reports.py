"""What nodes tell ctld of themselves: registration (with what they run, reconciled
with what ctld places there, and the fencing of what they may not keep) and
heartbeats. What a node held back of its jobs goes to JobReports (injected:
``apply_updates``), its faults to NodeOps (ctld/ops/node_ops.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import structlog

from corral.errors import InvalidRequest
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change, liveness
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.fleet.liveness import Verdicts
from ctld.fleet.loopwatch import LoopWatch
from ctld.model import failures
from ctld.model import jobstate as js
from ctld.model.gpu_samples import holders
from ctld.model.nodes import POWERING_DOWN, NodeRecord
from ctld.ops.endings import Endings
from ctld.ops.node_ops import NodeOps
from ctld.ops.suspects import Suspects

log = structlog.get_logger("ctld")
#: JobReports.apply_updates
ApplyUpdates = Callable[[NodeRecord, Iterable[pb.JobStatusUpdate]], Awaitable[None]]


class NodeReports:
    def __init__(
        self,
        state: State,
        endings: Endings,
        outbox: Outbox,
        suspects: Suspects,
        apply_updates: ApplyUpdates,
        ops: NodeOps,
    ) -> None:
        self.state = state
        self.endings = endings
        self.outbox = outbox
        self.suspects = suspects
        self.apply_updates = apply_updates  # JobReports': what a node held back
        self.ops = ops
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
        await self.apply_updates(node, req.unreported)
        await self.ops.node_faults(node, req.health)
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
