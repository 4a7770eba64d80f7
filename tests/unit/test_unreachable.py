"""A node that does not answer is told apart from one that refuses, and a kill to it is
retried until it answers or goes DOWN (real gRPC over a real socket)."""

from __future__ import annotations

import asyncio
import socket
import types
from typing import Any

import grpc
import pytest

from corral.config import NodeConfig
from corral.errors import CorralError, NodeUnreachable
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from ctld.core.outbox import Outbox
from ctld.daemon.dispatch import GrpcDispatcher
from ctld.model.nodes import NodeRecord
from noded.agent import _details


def closed_port() -> int:
    """A port nothing listens on (bound, read, closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node(address: str) -> NodeRecord:
    return NodeRecord("n1", NodeConfig(("n1",)), ["p"], address=address)


async def test_ctld_reports_a_silent_node_as_unreachable_not_refused() -> None:
    dispatcher = GrpcDispatcher()
    try:
        with pytest.raises(NodeUnreachable, match=r"node n1 \(127\.0\.0\.1:\d+\) unreachable"):
            await dispatcher.signal(node(f"127.0.0.1:{closed_port()}"), pb.SignalJobRequest())
    finally:
        await dispatcher.close()


async def test_noded_words_asyncio_grpc_errors_with_their_status() -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{closed_port()}") as channel:
        stub = pbg.NodeControllerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Heartbeat(pb.HeartbeatRequest(name="n1"), timeout=5)
    assert _details(err.value).startswith("UNAVAILABLE: ")


class Flaky:
    """Does not answer ``misses`` times, then takes the signal."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.calls = 0

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None:
        raise AssertionError("not used")

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool:
        self.calls += 1
        if self.calls <= self.misses:
            raise NodeUnreachable("no answer")
        return True


class NoWait:
    """A clock whose sleeps return at once, remembered."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def outbox(dispatcher: Any, clock: NoWait | None = None) -> Outbox:
    state: Any = types.SimpleNamespace(
        config=types.SimpleNamespace(heartbeat=types.SimpleNamespace(interval_s=2.0)),
        clock=clock or NoWait(),
    )
    return Outbox(state, dispatcher)


async def test_a_kill_to_an_unreachable_node_is_retried_until_it_answers() -> None:
    flaky, clock = Flaky(misses=3), NoWait()
    kill = pb.SignalJobRequest(job_id=1, terminate=True, signal=15)
    await asyncio.wait_for(outbox(flaky, clock)._send(node("x:1"), kill), 10)
    assert flaky.calls == 4
    assert clock.slept == [0.5, 1.0, 2.0]  # backing off up to one heartbeat interval


async def test_retries_stop_once_the_node_is_down_and_plain_signals_are_not_retried() -> None:
    flaky = Flaky(misses=100)
    n = node("x:1")
    n.down = True  # fencing finishes the job when the node comes back
    await asyncio.wait_for(outbox(flaky)._send(n, pb.SignalJobRequest(terminate=True)), 10)
    assert flaky.calls == 1
    up = Flaky(misses=100)
    await asyncio.wait_for(outbox(up)._send(node("x:1"), pb.SignalJobRequest(signal=10)), 10)
    assert up.calls == 1


class Refusing(pbg.NodeAgentServicer):
    async def SignalJob(self, request: pb.SignalJobRequest, context: Any) -> pb.SignalJobResponse:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not you")
        raise AssertionError("abort raises")


async def test_a_node_that_answers_no_is_refused_not_unreachable() -> None:
    server = grpc.aio.server()
    pbg.add_NodeAgentServicer_to_server(Refusing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    dispatcher = GrpcDispatcher()
    try:
        with pytest.raises(CorralError, match="node n1 refused: not you") as err:
            await dispatcher.signal(node(f"127.0.0.1:{port}"), pb.SignalJobRequest())
        assert not isinstance(err.value, NodeUnreachable)
    finally:
        await dispatcher.close()
        await server.stop(None)
