"""ctld -> noded: one gRPC channel per node agent, reused across calls."""

from __future__ import annotations

import grpc
from grpc import aio

from corral.auth import CONTROLLER_CN, tls
from corral.errors import CorralError, NodeUnreachable
from corral.limits import GRPC_RECONNECT_OPTIONS
from corral.rpccodes import sent_error
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from ctld.model.nodes import NodeRecord

RPC_TIMEOUT_S = 10.0


class GrpcDispatcher:
    """With ``tls_dir``, ctld dials each node's agent port with its own certificate and
    accepts only a peer whose certificate names that node."""

    def __init__(self, tls_dir: str = "") -> None:
        self.tls_dir = tls_dir
        self._channels: dict[str, tuple[str, aio.Channel, pbg.NodeAgentAsyncStub]] = {}

    def _stub(self, node: NodeRecord) -> pbg.NodeAgentAsyncStub:
        address = node.agent_address or node.address
        cached = self._channels.get(node.name)
        if cached is not None and cached[0] == address:
            return cached[2]
        if self.tls_dir:
            channel = aio.secure_channel(
                address,
                tls.channel_credentials(self.tls_dir, CONTROLLER_CN),
                options=[*tls.channel_options(node.name), *GRPC_RECONNECT_OPTIONS],
            )
        else:
            channel = aio.insecure_channel(address, options=GRPC_RECONNECT_OPTIONS)
        stub = pbg.NodeAgentStub(channel)
        self._channels[node.name] = (address, channel, stub)
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

    async def reconfigure(self, node: NodeRecord) -> pb.Reconfigured:
        try:
            return await self._stub(node).Reconfigure(
                pb.ReconfigureRequest(), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise _unreachable(node, exc) from None

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
    # noded's refusal is a class of the error tree: the caller gets that class
    message = f"node {node.name} refused: {details}"
    return sent_error(exc, message) or CorralError(message)
