"""ctld -> noded: one gRPC channel per node agent, reused across calls."""

from __future__ import annotations

import grpc
from grpc import aio

from corral.errors import CorralError, NodeUnreachable
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from ctld.nodes import NodeRecord

RPC_TIMEOUT_S = 10.0


class GrpcDispatcher:
    def __init__(self) -> None:
        self._channels: dict[str, tuple[str, aio.Channel, pbg.NodeAgentAsyncStub]] = {}

    def _stub(self, node: NodeRecord) -> pbg.NodeAgentAsyncStub:
        cached = self._channels.get(node.name)
        if cached is not None and cached[0] == node.address:
            return cached[2]
        channel = aio.insecure_channel(node.address)
        stub = pbg.NodeAgentStub(channel)
        self._channels[node.name] = (node.address, channel, stub)
        return stub

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None:
        try:
            await self._stub(node).LaunchJob(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise _unreachable(node, exc) from None

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool:
        try:
            reply = await self._stub(node).SignalJob(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise _unreachable(node, exc) from None
        return bool(reply.found)

    async def close(self) -> None:
        for _addr, channel, _stub in self._channels.values():
            await channel.close(None)
        self._channels.clear()


def _unreachable(node: NodeRecord, exc: grpc.RpcError) -> CorralError:
    # what the asyncio stubs raise (AioRpcError) is not a grpc.Call, but has its methods
    call = isinstance(exc, aio.AioRpcError | grpc.Call)
    code = exc.code() if call else None
    details = exc.details() if call else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE or code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return NodeUnreachable(f"node {node.name} ({node.address}) unreachable: {details}")
    return CorralError(f"node {node.name} refused: {details}")
