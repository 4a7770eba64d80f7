"""SimulatedNodes: many nodes in one asyncio loop. Jobs are timers; reports go to ctld
through each node's outbox; nodes crash, revive and report faults on command."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from corral import __version__, hostlist
from corral.limits import GRPC_RECONNECT_OPTIONS
from corral.localcluster.simnodes.beats import HeartbeatBatcher
from corral.localcluster.simnodes.nodes import SimJob, SimNode, gpu_status, resources
from corral.localcluster.simnodes.script import parse_script
from corral.rpccodes import TRANSIENT
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg

Update = pb.JobStatusUpdate
RPC_TIMEOUT_S = 30.0
REGISTERING = 64  # RegisterNode calls in flight at once
MAX_BACKOFF_S = 5.0
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


class SimulatedNodes:
    """Many simulated nodes in one asyncio loop; ``start`` then ``stop``."""

    def __init__(
        self,
        ctld_address: str,
        nodes: list[tuple[str, int, int, int, str]],  # name, cpus, memory_mb, gpus, model
        *,
        listen: str = "127.0.0.1",
        port: int = 0,
        heartbeat_interval_s: float = 10.0,
        default_runtime_s: float = 1.0,
    ) -> None:
        self.ctld_address = ctld_address
        self.listen = listen
        self.port = port
        self.interval = heartbeat_interval_s
        self.default_runtime_s = default_runtime_s
        self.nodes: dict[str, SimNode] = {}
        for name, cpus, mem, gpus, model in nodes:
            self.nodes[name] = SimNode(name, cpus, mem, gpus, resources(cpus, mem, gpus, model))
        self.jobs: dict[int, SimJob] = {}
        self.address = ""
        self.counters = {
            "launched": 0,
            "finished": 0,
            "signalled": 0,
            "oversubscribed": 0,
            "registrations": 0,
            "fenced": 0,
            "heartbeats": 0,
            "reports": 0,
            "gpus_in_use": 0,
            "peak_gpus_in_use": 0,
        }
        self.violations: list[str] = []
        self._server: aio.Server | None = None
        self._channel: aio.Channel | None = None
        self._stub: pbg.NodeControllerAsyncStub | None = None
        self._beats: HeartbeatBatcher | None = None  # every node's heartbeats, sent together
        # registrations in flight: 12,500 at once after a ctld restart queued past their
        # deadline, and each retry was one more registration for ctld to make (issue 29)
        self._registering = asyncio.Semaphore(REGISTERING)
        self._tasks: list[asyncio.Task[None]] = []
        self._outbox_ready = asyncio.Event()

    # ------------------------------------------------------------ life

    async def start(self) -> None:
        server = aio.server(options=[("grpc.so_reuseport", 0)])
        pbg.add_NodeAgentServicer_to_server(_Servicer(self), server)
        bound = server.add_insecure_port(f"{self.listen}:{self.port}")
        if bound == 0:
            raise RuntimeError(f"simnodes: cannot listen on {self.listen}:{self.port}")
        await server.start()
        self._server = server
        self.address = f"{self.listen}:{bound}"
        # as noded's: back within 2 s of a ctld that was away (gRPC's own backoff grows
        # to 120 s, and the nodes would come back long after real ones)
        self._channel = aio.insecure_channel(self.ctld_address, options=GRPC_RECONNECT_OPTIONS)
        self._stub = pbg.NodeControllerStub(self._channel)
        count = max(1, len(self.nodes))
        for i, node in enumerate(self.nodes.values()):
            # spread the first beats over one interval, as nodes booted at different times
            offset = self.interval * i / count
            self._tasks.append(asyncio.create_task(self._heartbeats(node, offset)))
        self._tasks.append(asyncio.create_task(self._run_outbox()))

    async def wait_registered(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(n.registered or n.crashed for n in self.nodes.values()):
            if time.monotonic() > deadline:
                missing = [n.name for n in self.nodes.values() if not n.registered]
                raise TimeoutError(f"{len(missing)} nodes not registered: {missing[:5]}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        for sim in self.jobs.values():
            if sim.timer is not None:
                sim.timer.cancel()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        if self._channel is not None:
            await self._channel.close(None)

    # ------------------------------------------------------------ jobs

    def launch(self, request: pb.LaunchJobRequest) -> None:
        job = request.job
        host = self.nodes.get(job.batch_host)
        if host is None or host.crashed:
            raise Unavailable(f"no simulated node {job.batch_host!r} up here")
        if job.job_id in self.jobs:
            return  # a retried launch
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is None:
                continue
            over = [
                what
                for what, used, have in (
                    ("cpus", node.used_cpus + alloc.cpus, node.cpus),
                    ("memory", node.used_mem_mb + alloc.mem_mb, node.memory_mb),
                    ("gpus", len(node.used_gpus) + len(alloc.gpu_indices), node.gpus),
                )
                if used > have
            ]
            taken = node.used_gpus.intersection(alloc.gpu_indices)
            if over or taken or any(g >= node.gpus for g in alloc.gpu_indices):
                self.counters["oversubscribed"] += 1
                self.violations.append(
                    f"job {job.job_id} on {node.name}: over {over}, GPUs held {sorted(taken)}"
                )
            node.used_cpus += alloc.cpus
            node.used_mem_mb += alloc.mem_mb
            node.used_gpus.update(alloc.gpu_indices)
        self._count_gpus(sum(len(a.gpu_indices) for a in job.allocations))
        script = parse_script(job, dict(request.environment), self.default_runtime_s)
        sim = SimJob(job=job, script=script, started=time.time())
        self.jobs[job.job_id] = sim
        host.jobs.add(job.job_id)
        self.counters["launched"] += 1
        loop = asyncio.get_running_loop()
        limit = job.time_limit_s
        if 0 < limit < script.runtime_s:
            sim.timer = loop.call_later(limit, self._end, job.job_id, "timeout", signal.SIGTERM)
        else:
            sim.timer = loop.call_later(
                max(0.0, script.runtime_s), self._end, job.job_id, "exit", 0
            )

    def signal(self, request: pb.SignalJobRequest) -> bool:
        sim = self.jobs.get(request.job_id)
        if sim is None:
            return False
        self.counters["signalled"] += 1
        if request.HasField("step_id"):
            return True  # simulated jobs run no steps
        if request.terminate:
            self._end(request.job_id, "signal", signal.SIGTERM, by_request=True)
        elif request.signal in ENDING_SIGNALS:
            self._end(request.job_id, "signal", request.signal, by_request=True)
        return True

    def _end(self, job_id: int, how: str, sig: int, *, by_request: bool = False) -> None:
        sim = self.jobs.pop(job_id, None)
        if sim is None:
            return
        if sim.timer is not None:
            sim.timer.cancel()
        job = sim.job
        self._release(job)
        host = self.nodes.get(job.batch_host)
        if host is None or host.crashed:
            return  # a crashed node forgot it
        host.jobs.discard(job_id)
        elapsed = max(0.0, time.time() - sim.started)
        cpus = job.num_cpus or 1
        rss_kb = int((sim.script.rss_mb or min(job.mem_mb or 256, 1024) / 2) * 1024)
        usage = pb.JobUsage(
            max_rss_kb=rss_kb,
            ave_rss_kb=rss_kb * 3 // 4,
            user_cpu_s=elapsed * cpus * 0.9,
            system_cpu_s=elapsed * cpus * 0.05,
            samples=max(1, int(elapsed)),
        )
        if job.num_gpus:
            util = sim.script.gpu_util or 75.0
            usage.gpu_util_max, usage.gpu_util_mean = min(100.0, util * 1.2), util
            usage.gpu_mem_max_mb, usage.gpu_mem_mean_mb = 40000.0, 30000.0
        update = Update(
            job_id=job_id,
            kind=Update.KIND_EXITED,
            time=time.time(),
            usage=usage,
            restart_count=job.restart_count,  # which run ended: ctld ignores an earlier one's
        )
        if how == "exit":
            update.exit_code = sim.script.exit_code
        else:
            update.exit_signal = sig
            update.signalled_by_request = by_request
            if how == "timeout":
                update.end_reason = Update.END_TIMEOUT
        self.counters["finished"] += 1
        self._report(host, update)

    def _fence(self, node: SimNode, keep: set[int]) -> None:
        """As noded on registering: what ctld no longer places here (requeued while the
        node was DOWN) is killed before the node takes new work."""
        for job_id in sorted(node.jobs - keep):
            self.counters["fenced"] += 1
            self._end(job_id, "signal", signal.SIGKILL)

    def _count_gpus(self, delta: int) -> None:
        c = self.counters
        c["gpus_in_use"] += delta
        c["peak_gpus_in_use"] = max(c["peak_gpus_in_use"], c["gpus_in_use"])

    def _release(self, job: pb.Job) -> None:
        self._count_gpus(-sum(len(a.gpu_indices) for a in job.allocations))
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is None:
                continue
            node.used_cpus -= alloc.cpus
            node.used_mem_mb -= alloc.mem_mb
            node.used_gpus.difference_update(alloc.gpu_indices)

    def _report(self, node: SimNode, update: pb.JobStatusUpdate) -> None:
        node.outbox.append(update)
        self._outbox_ready.set()

    # ------------------------------------------------------------ the link to ctld

    def _request(self, node: SimNode) -> pb.RegisterNodeRequest:
        return pb.RegisterNodeRequest(
            name=node.name,
            address=self.address,
            resources=node.resources,
            boot_time=node.boot_time,
            version=__version__,
            os="simulated",
            running_job_ids=sorted(node.jobs),
            unreported=list(node.outbox),
            health=list(node.health),
        )

    async def _heartbeats(self, node: SimNode, offset: float) -> None:
        assert self._stub is not None
        stub = self._stub
        await asyncio.sleep(offset)
        backoff = 0.2
        while True:
            if node.crashed:
                await node.beat_now.wait()
                node.beat_now.clear()
                continue
            try:
                if not node.registered:
                    req = self._request(node)
                    async with self._registering:  # a storm at ctld's pace, not all at once
                        reply = await stub.RegisterNode(req, timeout=RPC_TIMEOUT_S)
                    del node.health[: len(req.health)]
                    self._fence(node, set(reply.keep_job_ids))
                    node.registered = True
                    self.counters["registrations"] += 1
                node.beat_now.clear()
                beat = pb.HeartbeatRequest(
                    name=node.name,
                    running_job_ids=sorted(node.jobs),
                    health=list(node.health),
                    gpus=gpu_status(node),
                )
                again = await self._batcher(stub).beat(beat)  # sent with others due now
                self.counters["heartbeats"] += 1
                if again:
                    node.registered = False
                    continue
                del node.health[: len(beat.health)]
                backoff = 0.2
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(node.beat_now.wait(), self.interval)
            except grpc.RpcError as exc:
                # as noded: a lost or late beat is beaten again, ctld's answer says when to
                # register (only a refusal makes the node register at once)
                if exc.code() not in TRANSIENT:
                    node.registered = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _batcher(self, stub: pbg.NodeControllerAsyncStub) -> HeartbeatBatcher:
        if self._beats is None or self._beats.stub is not stub:
            self._beats = HeartbeatBatcher(stub, RPC_TIMEOUT_S)
        return self._beats

    async def _run_outbox(self) -> None:
        """Deliver every node's pending updates, one ReportJobStatus per node, in parallel."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            busy = [n for n in self.nodes.values() if n.outbox and not n.crashed]
            results = await asyncio.gather(*(self._deliver(n) for n in busy))
            if not all(results):
                await asyncio.sleep(0.5)
                self._outbox_ready.set()

    async def _deliver(self, node: SimNode) -> bool:
        assert self._stub is not None
        batch = list(node.outbox)
        try:
            await self._stub.ReportJobStatus(
                pb.ReportJobStatusRequest(node=node.name, updates=batch), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError:
            return False
        del node.outbox[: len(batch)]
        self.counters["reports"] += len(batch)
        return True

    # ------------------------------------------------------------ failure on command

    def crash(self, names: list[str]) -> None:
        """The nodes die: no heartbeats, no answers, their jobs and outboxes forgotten."""
        for name in names:
            node = self.nodes[name]
            node.crashed, node.registered = True, False
            for job_id in list(node.jobs):
                sim = self.jobs.pop(job_id, None)
                if sim is not None:
                    if sim.timer is not None:
                        sim.timer.cancel()
                    self._release(sim.job)
            node.jobs.clear()
            node.outbox.clear()

    def revive(self, names: list[str]) -> None:
        """The nodes boot again and register (with nothing running)."""
        for name in names:
            node = self.nodes[name]
            node.crashed = False
            node.boot_time = time.time()
            node.beat_now.set()

    def fault(self, names: list[str], reason: str, detail: str = "") -> None:
        """A health event (e.g. "GPU 3 XID 79"), sent with an immediate heartbeat."""
        for name in names:
            node = self.nodes[name]
            node.health.append(
                pb.NodeHealthEvent(reason=reason, detail=detail or reason, time=time.time())
            )
            node.beat_now.set()

    def stats(self) -> dict[str, Any]:
        return {
            **self.counters,
            "running": len(self.jobs),
            "nodes": len(self.nodes),
            "registered": sum(1 for n in self.nodes.values() if n.registered),
            "violations": self.violations[:20],
        }

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """One command: {"cmd": "crash"|"revive"|"fault"|"stats", "nodes": "hostlist", ...}."""
        cmd = request.get("cmd")
        names = hostlist.expand(str(request.get("nodes", ""))) if request.get("nodes") else []
        unknown = [n for n in names if n not in self.nodes]
        if unknown:
            return {"ok": False, "error": f"unknown nodes: {unknown[:5]}"}
        if cmd == "crash":
            self.crash(names)
        elif cmd == "revive":
            self.revive(names)
        elif cmd == "fault":
            self.fault(names, str(request.get("reason", "simulated fault")))
        elif cmd != "stats":
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        return {"ok": True, "stats": self.stats()}


class Unavailable(Exception):
    pass


class _Servicer(pbg.NodeAgentServicer):
    def __init__(self, sim: SimulatedNodes) -> None:
        self.sim = sim

    async def LaunchJob(
        self, request: pb.LaunchJobRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.LaunchJobResponse:
        try:
            self.sim.launch(request)
        except Unavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return pb.LaunchJobResponse()

    async def SignalJob(
        self, request: pb.SignalJobRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SignalJobResponse:
        return pb.SignalJobResponse(found=self.sim.signal(request))

    async def Witness(
        self, request: pb.WitnessRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.WitnessResponse:
        # no witness: a real node that asks counts no confirmation here (it fences)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "simulated nodes are no witnesses")
        return pb.WitnessResponse()  # pragma: no cover - abort raises

    async def Reconfigure(
        self, request: pb.ReconfigureRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Reconfigured:
        # a simulated node reads nothing of the config after its start: nothing to apply
        return pb.Reconfigured(daemon="simulated nodes")

    async def RunTasks(
        self,
        request_iterator: AsyncIterator[pb.TaskInput],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.TaskEvent]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "simulated nodes run no job steps")
        yield pb.TaskEvent()  # pragma: no cover - abort raises
