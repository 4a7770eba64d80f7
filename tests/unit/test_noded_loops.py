"""noded's loops on the injected clock (corral/clock.py): heartbeats, the outbox's
retries, the self-fence watch and its witnesses, the step and job samplers and the GPU
health watch sleep and measure on the clock they are given, so a test moves a
ManualClock and nothing waits in real time. ctld is real (its NodeController service
over real gRPC, on the same clock); a peer answering as witness is a real NodeAgent."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from grpc import aio

from corral.clock import ManualClock
from corral.config import GpuConfig, NodedConfig, parse_config
from corral.testing.inprocess import make_cluster
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from corral.wire.methods import NODE_CONTROLLER
from ctld.api.grpc_service import service_handler
from ctld.api.rpc import NodeControllerApi
from ctld.control.cluster import Cluster
from noded import monitor, progress, witness
from noded.agent import RECONNECT_S, ControllerLink, NodeAgentServicer
from noded.gpu.fake import FakeGpus
from noded.launcher import Launcher
from noded.live import LiveSampler
from noded.server import _watch_gpus
from noded.steps import RunningStep, StepRunner, Task
from noded.witness import ASK_TIMEOUT_S, Quorum, Witness

pytestmark = pytest.mark.timeout(60)

INTERVAL_S = 1.0
FENCE_AFTER_S = 8.0  # the peers are asked from 7 s on (an interval before)
CONFIG = parse_config(
    {
        "heartbeat": {"interval_s": INTERVAL_S, "timeout_s": 60},
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "p", "nodes": "n[1-2]", "default": True}],
    }
)


async def _verify(job_id: int, step_id: int) -> Any:
    raise AssertionError("not called")


async def eventually(check: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Poll ``check`` (letting the loops run) until it holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def advance(clock: ManualClock, seconds: float, step: float = 0.25) -> None:
    """Move the clock on in steps; after each, wait until the loop sleeps on the clock
    again (it may have asked its peers over the network meanwhile)."""
    end = clock.now + seconds
    while clock.now < end:
        clock.advance(min(step, end - clock.now))
        await eventually(lambda: clock.sleepers >= 1, "the loop to sleep on the clock")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Recording(RunningStep):
    """A step of job 7 here whose signals are recorded (its processes are not real)."""

    def __init__(self) -> None:
        super().__init__(7, 0, 0)
        self.got: list[int] = []

    def signal(self, sig: int) -> None:
        self.got.append(sig)


class Node:
    """noded's parts for one node: a real launcher and step runner, its link to ctld."""

    def __init__(self, spool: pathlib.Path, clock: ManualClock, ctld: str, **link: Any) -> None:
        self.clock = clock
        self.launcher = Launcher("n1", str(spool), lambda update: None, clock=clock)
        self.steps = StepRunner("n1", "corral-test-{job_id}", _verify, clock=clock)
        self.step = Recording()
        self.steps.steps[(7, 0)] = self.step
        self.link = ControllerLink(
            ctld,
            "n1",
            "127.0.0.1:1",
            pb.NodeResources(cpus=8, memory_mb=16384),
            self.launcher,
            INTERVAL_S,
            self.steps,
            clock=clock,
            **link,
        )
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, loop: Callable[[], Any]) -> None:
        self.tasks.append(asyncio.ensure_future(loop()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.link.close()


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock(now=1_000_000.0)


@pytest.fixture
async def cut_off(tmp_path: pathlib.Path, clock: ManualClock) -> AsyncIterator[Node]:
    """A node whose ctld never answers (nothing listens there), self-fencing."""
    node = Node(
        tmp_path / "spool", clock, f"127.0.0.1:{closed_port()}", fence_after_s=FENCE_AFTER_S
    )
    yield node
    await node.stop()


class Peer:
    """Another node's real NodeAgent, answering as a witness how long it has not heard
    ctld (``deaf_s``); ``asked`` counts the questions."""

    def __init__(self, spool: pathlib.Path) -> None:
        self.deaf_s = 0.0
        self.asked = 0
        launcher = Launcher("n2", str(spool), lambda update: None)
        steps = StepRunner("n2", "corral-test-{job_id}", _verify)
        servicer = NodeAgentServicer(launcher, steps, controller_only=False)
        servicer.witness = self.answer
        self.server = aio.server()
        pbg.add_NodeAgentServicer_to_server(servicer, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    def answer(self) -> pb.WitnessResponse:
        self.asked += 1
        return witness.answer("n2", self.deaf_s, registered=True)


@pytest.fixture
async def peer(tmp_path: pathlib.Path) -> AsyncIterator[Peer]:
    served = Peer(tmp_path / "peer")
    await served.server.start()
    yield served
    await served.server.stop(None)


def with_witness(node: Node, peer: Peer) -> Witness:
    """The cluster's answer says: two nodes not hearing ctld make it hold."""
    seen = Witness(node.launcher.spool_dir, "n1", INTERVAL_S)
    seen.quorum = Quorum([("n2", peer.address)], needed=2)
    node.link.witness = seen
    return seen


# ------------------------------------------------------------ the self-fence watch


async def test_a_cut_off_node_fences_past_fence_after_s_not_before(cut_off: Node) -> None:
    cut_off.start(cut_off.link.run_self_fence)
    await eventually(lambda: cut_off.clock.sleepers == 1, "the watch to sleep on the clock")
    await advance(cut_off.clock, FENCE_AFTER_S - 0.25)
    assert cut_off.step.got == []  # 7.75 s without ctld: its jobs run on
    await advance(cut_off.clock, 1.0)
    assert cut_off.step.got[:2] == [signal.SIGCONT, signal.SIGTERM]  # fenced


async def test_an_answer_from_ctld_starts_the_silence_over(cut_off: Node) -> None:
    cut_off.start(cut_off.link.run_self_fence)
    await advance(cut_off.clock, FENCE_AFTER_S - 1)
    cut_off.link._contacted()  # what an answered heartbeat does
    await advance(cut_off.clock, FENCE_AFTER_S - 1)
    assert cut_off.step.got == []
    await advance(cut_off.clock, 2.0)
    assert signal.SIGTERM in cut_off.step.got


async def test_the_peers_are_asked_from_an_interval_before_the_fence(
    cut_off: Node, peer: Peer
) -> None:
    with_witness(cut_off, peer)
    peer.deaf_s = 0.0  # the peer hears ctld: this node alone is cut off
    cut_off.start(cut_off.link.run_self_fence)
    await advance(cut_off.clock, FENCE_AFTER_S - INTERVAL_S - 0.25)
    assert peer.asked == 0  # 6.75 s: too early to ask
    await advance(cut_off.clock, 0.5)
    assert peer.asked >= 1  # asked from 7 s on, before the fence time
    assert cut_off.step.got == []
    await advance(cut_off.clock, 1.5)
    assert signal.SIGTERM in cut_off.step.got  # its peer hears ctld: fenced


async def test_jobs_are_kept_while_the_witnesses_hold(
    cut_off: Node, peer: Peer, tmp_path: pathlib.Path
) -> None:
    held = with_witness(cut_off, peer)
    peer.deaf_s = 3600.0  # ctld is away for the whole cluster
    cut_off.start(cut_off.link.run_self_fence)
    await advance(cut_off.clock, 4 * FENCE_AFTER_S)
    assert cut_off.step.got == []  # kept, far past the fence time
    assert held.holding
    assert os.path.exists(os.path.join(cut_off.launcher.spool_dir, "hold"))  # for the guard
    asked = peer.asked
    await advance(cut_off.clock, 3 * INTERVAL_S)
    assert asked < peer.asked <= asked + 4  # asked again about each interval
    peer.deaf_s = 0.0  # ctld is back for the others: is this node the one cut off?
    await advance(cut_off.clock, 1.25 * INTERVAL_S)
    assert cut_off.link._beat_now.is_set()  # it beats at once, and waits for an answer
    assert cut_off.step.got == [] and not held.holding
    # ctld times this node afresh (a whole timeout, fence_after_s + interval) from its
    # hold's end: the node waits the rest of its fence time less an interval and a
    # round of questions, not just a reconnect (a loaded ctld took 2.04 s to answer)
    grace = cut_off.link.reconnect_grace()
    assert grace == FENCE_AFTER_S - INTERVAL_S - ASK_TIMEOUT_S > RECONNECT_S
    await advance(cut_off.clock, grace - 1.25 - 0.25)  # the wait began within 1.25 s
    assert cut_off.step.got == []  # past a reconnect's 2 s: the jobs still run
    cut_off.link.registered.set()
    await advance(cut_off.clock, 1.25 + 0.25 + INTERVAL_S)
    assert signal.SIGTERM in cut_off.step.got  # no answer within the wait
    # it registers again: ctld, which may still hold its jobs RUNNING, learns they are
    # gone and requeues them
    assert not cut_off.link.registered.is_set()


async def test_an_answer_within_the_reconnect_wait_keeps_the_jobs(
    cut_off: Node, peer: Peer
) -> None:
    with_witness(cut_off, peer)
    peer.deaf_s = 3600.0
    cut_off.start(cut_off.link.run_self_fence)
    await advance(cut_off.clock, 2 * FENCE_AFTER_S)  # held
    peer.deaf_s = 0.0
    await advance(cut_off.clock, 1.25 * INTERVAL_S)
    assert cut_off.link._beat_now.is_set()
    cut_off.link._contacted()  # what the heartbeat loop does with ctld's answer
    await advance(cut_off.clock, FENCE_AFTER_S - 1)
    assert cut_off.step.got == []


class Freezer:
    """A TCP proxy to ctld whose connections made before ``freeze()`` stop carrying
    bytes, as a cut link leaves a connection: not closed, TCP retransmitting with a
    backoff of seconds. Connections made after it carry on."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.frozen: set[asyncio.StreamWriter] = set()
        self.open: set[asyncio.StreamWriter] = set()
        self.writers: list[asyncio.StreamWriter] = []  # both ends of every connection
        self.tasks: set[asyncio.Task[Any]] = set()
        self.server: asyncio.AbstractServer | None = None
        self.address = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self.frozen |= self.open

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self.open.add(writer)
        self.writers += [writer, up_writer]
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if writer in self.frozen:
                    await asyncio.Event().wait()  # stuck for good
                dst.write(data)
                await dst.drain()

        await asyncio.gather(
            pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
        )

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for w in self.writers:
            w.close()
        await asyncio.gather(*(w.wait_closed() for w in self.writers), return_exceptions=True)
        await self.server.wait_closed()


async def test_a_node_whose_peers_hear_ctld_again_reaches_it_over_a_fresh_connection(
    tmp_path: pathlib.Path, clock: ManualClock, ctld: Ctld, peer: Peer
) -> None:
    """After a whole-cluster cut the node's connection to ctld may stay stuck, and its
    heartbeat waits there for its whole deadline (10 s): longer than its reconnect wait,
    so it fenced although ctld answered (a CI run: 10 ms too late). Its peers hearing
    ctld, it beats over a fresh connection at once."""
    await ctld.server.start()
    proxy = Freezer(ctld.address)
    await proxy.start()
    node = Node(tmp_path / "spool", clock, proxy.address, fence_after_s=FENCE_AFTER_S)
    fences: list[set[int]] = []  # ctld does not know the node's fake step: no kills
    node.link.fence = lambda keep: fences.append(keep) or []  # type: ignore[method-assign]
    try:
        node.start(node.link.run_heartbeats)
        node.start(node.link.run_self_fence)
        await eventually(lambda: node.link.contacts >= 2, "registered and heard")
        proxy.freeze()  # the cut: the connection stays, and carries nothing
        held = with_witness(node, peer)  # (ctld's answers name the peers: none here)
        peer.deaf_s = 3600.0  # the whole cluster does not hear ctld: hold
        fences.clear()
        await advance(node.clock, 2 * FENCE_AFTER_S)
        assert held.holding and fences == []
        heard = node.link.contacts
        peer.deaf_s = 0.0  # ctld is back for the peers
        await advance(node.clock, 1.25 * INTERVAL_S)
        await eventually(lambda: node.link.contacts > heard, "an answer over a fresh connection")
        await advance(node.clock, node.link.reconnect_grace() + INTERVAL_S)
        assert fences == [] and not held.holding  # its jobs run on
    finally:
        await node.stop()
        await proxy.close()


# ------------------------------------------------------------ heartbeats and the outbox


class Ctld:
    """ctld's real NodeController service over real gRPC, on the test's clock."""

    def __init__(self, cluster: Cluster, port: int = 0) -> None:
        self.cluster = cluster
        self.server = aio.server()
        api = NodeControllerApi(cluster, verify_nodes=False)
        self.server.add_generic_rpc_handlers((service_handler(NODE_CONTROLLER, api.call),))
        self.address = f"127.0.0.1:{self.server.add_insecure_port(f'127.0.0.1:{port}')}"


@pytest.fixture
async def ctld(tmp_path: pathlib.Path, clock: ManualClock) -> AsyncIterator[Ctld]:
    served = Ctld(make_cluster(CONFIG, f"sqlite:///{tmp_path}/ctld.db", clock=clock))
    yield served
    await served.server.stop(None)
    served.cluster.store.close()


async def test_heartbeats_go_each_interval_of_the_clock_and_at_once_for_a_fault(
    tmp_path: pathlib.Path, clock: ManualClock, ctld: Ctld
) -> None:
    await ctld.server.start()
    node = Node(tmp_path / "spool", clock, ctld.address)
    seen = ctld.cluster.nodes["n1"]
    try:
        node.start(node.link.run_heartbeats)
        await eventually(lambda: seen.last_heartbeat == clock.now, "the first heartbeat")
        first = clock.now
        await eventually(lambda: clock.sleepers == 1, "the loop to wait on the clock")
        await advance(clock, INTERVAL_S - 0.25)
        assert seen.last_heartbeat == first  # none before the interval is over
        await advance(clock, 0.25)
        await eventually(lambda: seen.last_heartbeat == first + INTERVAL_S, "the next beat")
        node.link.report_health("GPU XID error", "xid 79 on GPU 0")  # no clock move
        await eventually(lambda: seen.drain, "the fault's beat (the node drained)")
        assert seen.reason == "GPU XID error"
    finally:
        await node.stop()


async def test_the_outbox_retries_on_the_clock(
    tmp_path: pathlib.Path, clock: ManualClock, ctld: Ctld
) -> None:
    port = closed_port()
    node = Node(tmp_path / "spool", clock, f"127.0.0.1:{port}")  # no ctld there yet
    later: Ctld | None = None
    try:
        node.start(node.link.run_outbox)
        update = pb.JobStatusUpdate(job_id=99, kind=pb.JobStatusUpdate.KIND_EXITED)
        node.link.report(update)
        await eventually(lambda: clock.sleepers == 1, "the retry to wait on the clock")
        assert list(node.link.outbox) == [update]  # kept until ctld acknowledges it
        later = Ctld(ctld.cluster, port)  # bound only now: a bound port takes connections
        await later.server.start()
        deadline = time.monotonic() + 30
        while node.link.outbox:  # the backoff doubles to MAX_BACKOFF_S: move past it
            assert time.monotonic() < deadline, "the report was never delivered"
            clock.advance(1.0)
            await eventually(lambda: clock.sleepers == 1 or not node.link.outbox, "a retry")
    finally:
        await node.stop()
        if later is not None:
            await later.server.stop(None)


# ------------------------------------------------------------ the samplers


async def test_the_gpu_health_watch_polls_each_interval_of_the_clock(
    tmp_path: pathlib.Path, clock: ManualClock, cut_off: Node
) -> None:
    state = tmp_path / "gpus.json"
    state.write_text(json.dumps({"events": [{"kind": "xid", "gpu": 0, "code": 79}]}))
    gpus = FakeGpus(GpuConfig(count=2, state_file=str(state)), "n1")
    live = LiveSampler(cut_off.launcher, cut_off.steps, gpus)
    cut_off.start(lambda: _watch_gpus(gpus, cut_off.link, lambda: 5.0, live, clock))
    await eventually(lambda: clock.sleepers == 1, "the watch to sleep on the clock")
    await advance(clock, 4.75)
    assert cut_off.link.health == []
    await advance(clock, 0.25)
    await eventually(lambda: cut_off.link.health, "the fault polled")
    (fault,) = cut_off.link.health
    assert (fault.time, live.faults) == (clock.now, {0: fault.reason})


async def test_the_step_sampler_checks_progress_each_interval_of_the_clock(
    tmp_path: pathlib.Path, clock: ManualClock
) -> None:
    reports: list[pb.JobStatusUpdate] = []
    runner = StepRunner(
        "n1",
        "m-{job_id}",
        _verify,
        reports.append,
        spool_dir=str(tmp_path),
        clock=clock,
        noded=NodedConfig(sample_interval_s=5.0),
    )
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    path = progress.step_file(str(tmp_path), 7, 0, 0)
    assert progress.make_file(path, os.getuid(), os.getgid())
    silent_since = clock.now - 60
    os.utime(path, (silent_since, silent_since))  # a minute silent: past its 5 s timeout
    exited = asyncio.get_running_loop().create_future()
    running = RunningStep(7, 0, run=0, stall_timeout_s=5.0)
    running.tasks = [Task(0, proc, -1, exited, (-1, -1), progress=path, gpus=[])]
    runner.steps[(7, 0)] = running
    sampler = asyncio.ensure_future(runner.run_monitor())
    try:
        await eventually(lambda: clock.sleepers == 1, "the sampler to sleep on the clock")
        assert reports == []
        clock.advance(5.0)
        await eventually(lambda: reports, "the stall found at the first sample")
        assert reports[0].end_reason == pb.JobStatusUpdate.END_STALLED
    finally:
        sampler.cancel()
        if running.kill_task is not None:
            running.kill_task.cancel()
        if proc.returncode is None:  # the stall's SIGTERM ends it
            proc.kill()
        await proc.wait()


async def test_the_job_sampler_sleeps_on_the_launchers_clock(cut_off: Node) -> None:
    cut_off.start(lambda: monitor.run(cut_off.launcher))
    await eventually(lambda: cut_off.clock.sleepers == 1, "the sampler to sleep on the clock")
