"""noded's two faces: the NodeAgent service ctld calls, and the link to ctld.

The link registers, heartbeats, and delivers job status updates from an outbox
that survives ctld being away: updates are sent in batches and dropped only once
ctld has acknowledged them (ctld makes them durable before it answers).
"""

from __future__ import annotations

import asyncio
import os
import platform
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
import structlog
from grpc import aio

from corral import __version__
from corral.auth import CONTROLLER_CN, tls
from corral.clock import Clock, SystemClock, wait_event
from corral.errors import (
    CorralError,
    InvalidRequest,
    NodeUnreachable,
    PermissionDenied,
    Unauthenticated,
)
from corral.rpccodes import TRANSIENT, abort, answers_errors
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from noded import spool
from noded.ctldlink import CtldLink
from noded.launcher import Launcher, LaunchError
from noded.steps import StepRunner
from noded.witness import ASK_TIMEOUT_S, Witness

log = structlog.get_logger("noded")
RPC_TIMEOUT_S = 10.0
RECONNECT_S = 2.0  # gRPC reconnects within a second (corral/limits.py), with a margin
MAX_BACKOFF_S = 5.0


class NodeAgentServicer(pbg.NodeAgentServicer):
    """With ``controller_only``, LaunchJob and SignalJob come from ctld or from no one:
    the caller's certificate (checked against the cluster CA) must name the controller.
    RunTasks (srun) is served on the other port too; ctld vouches for its step."""

    def __init__(
        self, launcher: Launcher, steps: StepRunner, *, controller_only: bool = True
    ) -> None:
        self.launcher = launcher
        self.steps = steps
        self.controller_only = controller_only
        # whether this node hears ctld, for a peer cut off from it (witness.py)
        self.witness: Callable[[], pb.WitnessResponse] = pb.WitnessResponse
        # scontrol reconfigure, relayed by ctld (noded/reconfig.py; set by server.py)
        self.reconfigure: Callable[[str], Awaitable[pb.Reconfigured]] | None = None

    def _from_controller(self, context: aio.ServicerContext[Any, Any], what: str) -> None:
        if not self.controller_only:
            return
        name = tls.peer_name(context)
        if name == CONTROLLER_CN:
            return
        log.warning("NodeAgent call refused", call=what, certificate=name, peer=context.peer())
        refusal = PermissionDenied if name else Unauthenticated
        raise refusal(f"Access/permission denied: {what} is taken from the controller only")

    @answers_errors("noded")
    async def LaunchJob(
        self, request: pb.LaunchJobRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.LaunchJobResponse:
        self._from_controller(context, "LaunchJob")
        await self.launcher.launch(request)
        return pb.LaunchJobResponse()

    @answers_errors("noded")
    async def Reconfigure(
        self, request: pb.ReconfigureRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Reconfigured:
        self._from_controller(context, "Reconfigure")
        if self.reconfigure is None:
            raise NodeUnreachable("noded is starting")
        return await self.reconfigure("ctld")

    @answers_errors("noded")
    async def SignalJob(
        self, request: pb.SignalJobRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SignalJobResponse:
        self._from_controller(context, "SignalJob")
        if request.remove_checkpoint:  # the job ended for good: nothing to signal
            return pb.SignalJobResponse(found=await self.launcher.remove_checkpoint(request))
        if not request.terminate and not 0 <= request.signal < signal.NSIG:
            raise InvalidRequest(f"invalid signal {request.signal}")
        run = request.run if request.HasField("run") else None
        batch = self.launcher.jobs.get(request.job_id)
        if run is not None and batch is not None and batch.job.restart_count != run:
            # meant for another run of a requeued job (a late kill of its earlier copy)
            log.info("signal for another run ignored", job_id=request.job_id, run=run)
            return pb.SignalJobResponse(found=False)
        if request.HasField("step_id"):
            found = self.steps.signal(request.job_id, request.step_id, request.signal, run)
        elif request.terminate:
            found = self.launcher.signal(request)
            here = request.job_id in self.launcher.jobs
            found = (
                self.steps.terminate_job(request.job_id, request.kill_wait_s, run, job_here=here)
                or found
            )
        else:
            found = self.launcher.signal(request)
            if not request.batch_only:
                found = self.steps.signal(request.job_id, None, request.signal, run) or found
        return pb.SignalJobResponse(found=found)

    @answers_errors("noded")
    async def Witness(
        self, request: pb.WitnessRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.WitnessResponse:
        # any node of the cluster may ask (with TLS, its certificate is the cluster's)
        return self.witness()

    async def RunTasks(
        self,
        request_iterator: AsyncIterator[pb.TaskInput],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.TaskEvent]:
        try:
            first = await anext(aiter(request_iterator), None)
            if first is None or first.WhichOneof("what") != "start":
                raise InvalidRequest("RunTasks must begin with start")
            async for event in self.steps.run(first.start, request_iterator):
                yield event
        except CorralError as exc:
            await abort(context, exc)


class ControllerLink:
    """The link to ctld: with several controllers (controller.hosts), to the first that
    answers as primary; a failed call (unreachable, or a standby's NotPrimary) moves the
    link on to the next controller, and registration starts over there."""

    def __init__(
        self,
        ctld_address: str | Sequence[str],
        name: str,
        address: str,
        resources: pb.NodeResources,
        launcher: Launcher,
        heartbeat_interval_s: float,
        steps: StepRunner | None = None,
        fence_after_s: float = 0.0,
        contact_file: str = "",
        *,
        reports_file: str = "",
        tls_dir: str = "",
        agent_address: str = "",
        stream_address: str = "",
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        # the loops' time and sleeps (the launcher's clock; tests: a ManualClock)
        self.clock: Clock = clock or SystemClock()
        self.steps = steps
        # asked before fencing: does most of the cluster not hear ctld either?
        self.witness: Witness | None = None
        # cut off from ctld this long, its jobs are killed: ctld declares the node DOWN
        # (and requeues them) only later, so two copies never run at once (0: never)
        self.fence_after_s = fence_after_s
        self.contact_file = contact_file  # touched on each answer: the fence guard reads it
        self.last_contact = self.clock.monotonic()
        self.contacts = 0  # ctld's answers so far
        self._contacted()
        self.address = address
        self.resources = resources
        self.launcher = launcher
        self.interval = heartbeat_interval_s
        self.boot_time = self.clock()
        self.agent_address = agent_address
        self.stream_address = stream_address
        self.addresses = [ctld_address] if isinstance(ctld_address, str) else list(ctld_address)
        self.ctld = CtldLink(self.addresses, name, tls_dir, RPC_TIMEOUT_S)
        # undelivered reports live in the spool too: a restarted noded delivers them
        self.reports_file = reports_file
        self.outbox: list[pb.JobStatusUpdate] = (
            spool.load_reports(reports_file) if reports_file else []
        )
        self._outbox_ready = asyncio.Event()
        if self.outbox:
            log.info("undelivered reports of an earlier noded", node=name, n=len(self.outbox))
            self._outbox_ready.set()
        self.registered = asyncio.Event()
        # this noded took over all its predecessor ran (nothing lost): not a restart
        self.took_over = False
        self._unreachable = False  # a beat failed and none has been answered since
        self.health: list[pb.NodeHealthEvent] = []  # until a heartbeat carried them
        # usage of what runs here and GPU status, for each heartbeat (noded/live.py)
        self.live: Callable[[], tuple[list[pb.LiveUsage], list[pb.GpuStatus]]] = lambda: ([], [])
        self._beat_now = asyncio.Event()

    @property
    def stub(self) -> pbg.NodeControllerAsyncStub:
        return self.ctld.stub

    def running_job_ids(self) -> list[int]:
        """Jobs with anything here: batch scripts and step tasks (fenced ones until gone)."""
        steps = self.steps.job_ids() if self.steps is not None else set()
        return sorted(set(self.launcher.running_job_ids()) | steps)

    def fence(self, keep: set[int]) -> list[int]:
        """ctld lets this node keep only ``keep``: everything else is killed now."""
        fenced = self.launcher.fence(keep)
        if self.steps is not None:
            for job_id in self.steps.job_ids() - keep:
                self.steps.terminate_job(job_id, 0.0)
                fenced.append(job_id)
        return sorted(set(fenced))

    def report(self, update: pb.JobStatusUpdate) -> None:
        self.outbox.append(update)
        self._save_outbox()
        self._outbox_ready.set()

    def _save_outbox(self) -> None:
        if not self.reports_file:
            return
        try:
            spool.save_reports(self.reports_file, self.outbox)
        except OSError as exc:
            log.error("undelivered reports not saved in the spool", error=str(exc))

    async def get_step(self, job_id: int, step_id: int) -> tuple[pb.Job, pb.Step, str]:
        """ctld's record of a step srun wants run here, with the credential srun must
        show (LaunchError if ctld says no)."""
        try:
            reply = await self.stub.GetStep(
                pb.GetStepRequest(job_id=job_id, step_id=step_id, node=self.name),
                timeout=RPC_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            raise LaunchError(f"ctld refuses step {job_id}.{step_id}: {_details(exc)}") from None
        return reply.job, reply.step, reply.step_credential

    def report_health(self, reason: str, detail: str) -> None:
        """A fault that should drain this node: sent with the next (immediate) heartbeat."""
        log.error("node fault", node=self.name, reason=reason, detail=detail)
        self.health.append(pb.NodeHealthEvent(reason=reason, detail=detail, time=self.clock()))
        self._beat_now.set()

    async def register(self) -> None:
        req = pb.RegisterNodeRequest(
            name=self.name,
            address=self.address,
            resources=self.resources,
            boot_time=self.boot_time,
            version=__version__,
            os=f"{platform.system()} {platform.release()}",
            running_job_ids=self.running_job_ids(),
            unreported=list(self.outbox),  # the outbox delivers them again; ctld ignores repeats
            health=list(self.health),
            agent_address=self.agent_address,
            stream_address=self.stream_address,
            instance=self.launcher.instance,  # ctld tells a restart from a re-registration
            took_over=self.took_over,
        )
        reply = await self.stub.RegisterNode(req, timeout=RPC_TIMEOUT_S)
        self._contacted()
        if self.witness is not None:
            self.witness.learn(reply)
        del self.health[: len(req.health)]
        fenced = self.fence(set(reply.keep_job_ids))
        if fenced:
            # until a heartbeat shows them gone, ctld places nothing here
            log.warning("fenced jobs ctld gave to other nodes", node=self.name, jobs=fenced)
        if reply.heartbeat_interval_s > 0:
            self.interval = reply.heartbeat_interval_s
        self.registered.set()
        log.info(
            "registered with ctld",
            node=self.name,
            cluster=reply.cluster,
            controller=self.ctld.address,
        )

    async def run_heartbeats(self) -> None:
        backoff = 0.2
        while True:
            try:
                if not self.registered.is_set():
                    await self.register()
                self._beat_now.clear()
                beat = self._beat()
                reply = await self.stub.Heartbeat(beat, timeout=RPC_TIMEOUT_S)
                if not self._answered(reply):
                    continue
                del self.health[: len(beat.health)]
                backoff = 0.2
                await wait_event(self.clock, self._beat_now, self.interval)
            except grpc.RpcError as exc:
                if not self._unreachable:
                    log.warning(
                        # refused: its message says why (a version ctld does not serve)
                        "ctld unreachable" if exc.code() in TRANSIENT else "ctld refused",
                        node=self.name,
                        controller=self.ctld.address,
                        error=_details(exc),
                    )
                self._unreachable = True
                if exc.code() not in TRANSIENT:  # refused, not lost: its registration says why
                    self.registered.clear()
                # still registered: a ctld that lost this node (restarted, failed over, or
                # declared it DOWN) says so in its answer to the next beat. Registering
                # again after every failed beat made an overloaded ctld's load feed itself:
                # a registration costs it far more than the beat that timed out.
                if self.ctld.move_on():  # every controller tried: wait before the next round
                    self._beat_now.clear()
                    # a wake-up (ctld is back, say the peers) cuts the wait short
                    if await wait_event(self.clock, self._beat_now, backoff):
                        backoff = 0.2
                    else:
                        limit = MAX_BACKOFF_S if len(self.addresses) == 1 else self.interval
                        backoff = min(backoff * 2, limit)

    def _beat(self) -> pb.HeartbeatRequest:
        usage, gpus = self.live()
        return pb.HeartbeatRequest(
            name=self.name,
            running_job_ids=self.running_job_ids(),
            health=list(self.health),
            usage=usage,
            gpus=gpus,
            deaf_s=self.deaf_s(),
        )

    def _answered(self, reply: pb.HeartbeatResponse) -> bool:
        """ctld answered a beat; False if it asks this node to register again."""
        self._contacted()
        if self.witness is not None:
            self.witness.heard(reply)
        self._unreachable = False
        if reply.reregister:
            self.registered.clear()
            return False
        return True

    def deaf_s(self) -> float:
        """How long since ctld last answered (on the clock's monotonic time)."""
        return max(0.0, self.clock.monotonic() - self.last_contact)

    def _contacted(self) -> None:
        self.last_contact = self.clock.monotonic()
        self.contacts += 1  # an answer, even where the clock stood still since the last
        if self.witness is not None and self.witness.holding:
            self.witness.release()
        if self.contact_file:
            try:
                with open(self.contact_file, "a"):
                    os.utime(self.contact_file)
            except OSError as exc:
                log.warning("contact file not touched", path=self.contact_file, error=str(exc))

    async def run_self_fence(self) -> None:
        """Watch the time since ctld last answered, apart from the RPCs (which may hang
        for their whole deadline on a cut link): past fence_after_s, kill every job,
        unless most of the cluster does not hear ctld either (witness.py: then ctld
        declares nobody DOWN, and the jobs run on)."""
        if self.fence_after_s <= 0:
            return
        # the peers are asked from an interval before the fence time on, so the hold is in
        # place (<spool>/hold) before the guard would fence
        ask_after = max(2 * self.interval, self.fence_after_s - self.interval)
        while True:
            await self.clock.sleep(min(0.1, self.fence_after_s / 10))
            silent = self.deaf_s()
            if silent < min(ask_after, self.fence_after_s):
                continue
            holding = self.witness is not None and self.witness.holding
            if self.witness is not None and await self.witness.ctld_lost_by_quorum():
                if self.deaf_s() >= ask_after:
                    await self.clock.sleep(self.interval)  # asked again each interval
                continue
            if holding and await self._reached_within(self.reconnect_grace()):
                continue  # ctld is back (the peers hear it) and answered this node too
            if self.deaf_s() < self.fence_after_s:
                await self.clock.sleep(min(0.5, self.interval / 2))  # ask again before fencing
                continue
            fenced = self.fence(set())
            if fenced:
                log.error(
                    "ctld unreachable too long: jobs killed before ctld requeues them elsewhere",
                    node=self.name,
                    silent_s=round(silent, 1),
                    jobs=fenced,
                )
                # ctld may not have given this node up (it times a node afresh after a
                # hold): registering again tells it these jobs are gone, so it requeues
                # them instead of holding them RUNNING on a node that runs nothing
                self.registered.clear()

    def reconnect_grace(self) -> float:
        """How long a node whose peers hear ctld again waits for ctld to answer it too
        before it fences. ctld times each node still silent a whole timeout_s
        (fence_after_s + interval) from hearing most nodes again; this node learns of it
        at most an interval and a round of questions later, so it may wait the rest of
        its fence time less those, and never less than gRPC's reconnect takes."""
        rest = self.fence_after_s - self.interval - ASK_TIMEOUT_S
        return max(self.interval, RECONNECT_S, rest)

    async def _reached_within(self, seconds: float) -> bool:
        """The peers hear ctld again: beat now (no backoff left to wait) and say whether
        ctld answers within ``seconds``. ctld times a silent node a whole timeout_s from
        hearing most nodes again, so this node still fences well before that if not."""
        heard = self.contacts
        self._beat_now.set()
        # the heartbeat loop may be waiting on a connection the cut left stuck: one beat
        # over a fresh connection beside it
        self.ctld.reconnect()
        probe = asyncio.ensure_future(self._probe(seconds))
        try:
            deadline = self.clock.monotonic() + seconds
            while self.clock.monotonic() < deadline:
                if self.contacts != heard:
                    return True
                await self.clock.sleep(0.05)
            return self.contacts != heard
        finally:
            probe.cancel()

    async def _probe(self, seconds: float) -> None:
        try:
            reply = await self.stub.Heartbeat(self._beat(), timeout=max(seconds, 1.0))
        except grpc.RpcError:
            return  # the loop's own beats go on
        self._answered(reply)

    async def run_outbox(self) -> None:
        backoff = 0.2
        while True:
            await self._outbox_ready.wait()
            batch = list(self.outbox)
            try:
                await self.stub.ReportJobStatus(
                    pb.ReportJobStatusRequest(node=self.name, updates=batch), timeout=RPC_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                log.warning(
                    "status report not delivered, will retry",
                    node=self.name,
                    updates=len(batch),
                    error=_details(exc),
                )
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 0.2
            del self.outbox[: len(batch)]
            self._save_outbox()
            if not self.outbox:
                self._outbox_ready.clear()

    async def close(self) -> None:
        await self.ctld.close()


def _details(exc: grpc.RpcError) -> str:
    """The status text of a failed call, sync (grpc.Call) or asyncio (aio.AioRpcError)."""
    if isinstance(exc, aio.AioRpcError | grpc.Call):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)
