"""noded's NodeAgent answers through the one error tree (real gRPC on a real socket): a
refusal leaves as its class's status, named in the trailing metadata, and ctld's
dispatcher rebuilds that class; a bug of noded's is an internal error, logged."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc import aio

from corral.config import NodeConfig
from corral.errors import (
    ERROR_METADATA_KEY,
    InvalidRequest,
    NodeUnreachable,
    Unauthenticated,
)
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from ctld.daemon.dispatch import GrpcDispatcher
from ctld.model.nodes import NodeRecord
from noded.agent import NodeAgentServicer
from noded.launcher import Launcher
from noded.steps import StepRunner

pytestmark = pytest.mark.timeout(30)


async def _verify(job_id: int, step_id: int) -> Any:
    raise AssertionError("not called")


class Agent:
    """A NodeAgent servicer of a real Launcher and StepRunner, served on a free port."""

    def __init__(self, spool: pathlib.Path, *, controller_only: bool) -> None:
        self.launcher = Launcher("n1", str(spool), lambda update: None)
        steps = StepRunner("n1", "corral-test-{job_id}", _verify)
        self.servicer = NodeAgentServicer(self.launcher, steps, controller_only=controller_only)
        self.server = aio.server()
        pbg.add_NodeAgentServicer_to_server(self.servicer, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.node = NodeRecord("n1", NodeConfig(("n1",)), ["p"], address=self.address)


@pytest.fixture
async def agent(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> AsyncIterator[Agent]:
    served = Agent(tmp_path / "spool", controller_only=getattr(request, "param", False))
    await served.server.start()
    yield served
    await served.server.stop(None)


async def raw_error(agent: Agent, call: str, message: Any) -> aio.AioRpcError:
    async with aio.insecure_channel(agent.address) as channel:
        with pytest.raises(aio.AioRpcError) as err:
            await getattr(pbg.NodeAgentStub(channel), call)(message, timeout=10)
    return err.value


def sent_class(err: aio.AioRpcError) -> str | None:
    return dict(err.trailing_metadata() or ()).get(ERROR_METADATA_KEY)  # type: ignore[return-value]


@pytest.mark.parametrize("agent", [True], indirect=True)
async def test_a_caller_without_the_controllers_certificate_is_unauthenticated(
    agent: Agent,
) -> None:
    err = await raw_error(agent, "LaunchJob", pb.LaunchJobRequest())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert sent_class(err) == "Unauthenticated"
    dispatcher = GrpcDispatcher()
    try:  # ctld's side rebuilds the class noded named
        with pytest.raises(Unauthenticated, match=r"node n1 refused: .*from the controller only"):
            await dispatcher.signal(agent.node, pb.SignalJobRequest(job_id=7, signal=10))
    finally:
        await dispatcher.close()


async def test_an_invalid_signal_is_an_invalid_request(agent: Agent) -> None:
    err = await raw_error(agent, "SignalJob", pb.SignalJobRequest(job_id=7, signal=999))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert sent_class(err) == "InvalidRequest"
    dispatcher = GrpcDispatcher()
    try:
        with pytest.raises(InvalidRequest, match="invalid signal 999"):
            await dispatcher.signal(agent.node, pb.SignalJobRequest(job_id=7, signal=999))
    finally:
        await dispatcher.close()


async def test_a_reconfigure_before_noded_is_ready_is_node_unreachable(agent: Agent) -> None:
    err = await raw_error(agent, "Reconfigure", pb.ReconfigureRequest())
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert sent_class(err) == NodeUnreachable.__name__


async def test_run_tasks_must_begin_with_start(agent: Agent) -> None:
    async with aio.insecure_channel(agent.address) as channel:
        call = pbg.NodeAgentStub(channel).RunTasks(iter([pb.TaskInput()]), timeout=10)
        with pytest.raises(aio.AioRpcError) as err:
            async for _ in call:
                pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert sent_class(err.value) == "InvalidRequest"


async def test_a_bug_of_nodeds_is_an_internal_error_named_so(agent: Agent) -> None:
    async def broken(request: pb.LaunchJobRequest) -> None:
        raise RuntimeError("a bug")

    agent.launcher.launch = broken  # type: ignore[method-assign]
    err = await raw_error(agent, "LaunchJob", pb.LaunchJobRequest())
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert sent_class(err) == "CorralError"
    assert err.details() == "internal error in noded (see its log)"
