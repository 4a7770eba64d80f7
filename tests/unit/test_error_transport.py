"""Every class of the error tree over both real transports (sockets, in-process servers):
gRPC answers with the class's status and names it in the trailing metadata, the gateway
with its HTTP status and a JSON body, and the client rebuilds the same class from each.
A request that does not parse is InvalidRequest on both."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from aiohttp import web
from google.protobuf.message import Message

from corral.api import GrpcController, HttpController
from corral.errors import (
    BY_NAME,
    ERROR_METADATA_KEY,
    ControllerUnavailable,
    CorralError,
    InvalidRequest,
    StepBusy,
    all_errors,
    from_wire,
)
from corral.wire import corral_pb2 as pb
from corral.wire.methods import CONTROLLER, SERVICES
from ctld.api.auth import Caller
from ctld.api.gateway import make_app
from ctld.api.grpc_service import service_handler

RAISE_KEY = "x-test-raise"


class RaisingApi:
    """Stands in for ControllerApi: every call raises the class named in the metadata."""

    methods = {
        name: (getattr(pb, req), None) for name, (req, _r, _c, _s) in SERVICES[CONTROLLER].items()
    }

    async def call(self, method: str, request: Message, caller: Caller) -> Message:
        name = caller.metadata[RAISE_KEY]
        raise BY_NAME[name](f"{name} from {method}")

    def identify(self, caller: Caller) -> Any:
        # the "identity" carries the class to raise on to call_json
        return SimpleNamespace(uid=0, metadata=caller.metadata)

    async def call_json(self, method: str, request: Message, who: Any) -> bytes:
        await self.call(method, request, who)
        raise AssertionError("unreachable")


class Servers:
    def __init__(self, grpc_port: int, http_port: int) -> None:
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.http_address = ("127.0.0.1", http_port)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    api: Any = RaisingApi()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((service_handler(CONTROLLER, api.call),))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    runner = web.AppRunner(make_app(api), access_log=None)
    await runner.setup()
    http_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", http_port).start()
    try:
        yield Servers(grpc_port, http_port)
    finally:
        await runner.cleanup()
        await server.stop(grace=None)


def http_post(
    address: tuple[str, int], method: str, body: bytes, raise_name: str
) -> tuple[int, Any]:
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(
            f"POST /corral.v1.Controller/{method} HTTP/1.1\r\nHost: x\r\n"
            f"x-corral-user: u\r\nx-corral-uid: 1000\r\n{RAISE_KEY}: {raise_name}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


@pytest.mark.parametrize("cls", all_errors(), ids=lambda c: c.__name__)
async def test_each_error_class_crosses_both_transports(
    servers: Servers, cls: type[CorralError]
) -> None:
    name = cls.__name__
    # HTTP: status and JSON body, then the stdlib client rebuilds the class
    status, body = await asyncio.to_thread(http_post, servers.http_address, "GetJobs", b"{}", name)
    assert status == cls.http_status
    assert body == {"error": name, "code": cls.grpc_code, "message": f"{name} from GetJobs"}

    class RaisingHttp(HttpController):
        def headers(self, method: str) -> list[tuple[str, str]]:
            return [*super().headers(method), (RAISE_KEY, name)]

    with pytest.raises(CorralError) as http_err:
        await asyncio.to_thread(RaisingHttp(servers.http_address).get_jobs, {})
    assert type(http_err.value) is cls and http_err.value.message == f"{name} from GetJobs"

    # the typed client over gRPC rebuilds the same class
    class RaisingGrpc(GrpcController):
        def headers(self, method: str) -> list[tuple[str, str]]:
            return [*super().headers(method), (RAISE_KEY, name)]

    grpc_api = RaisingGrpc(servers.grpc_target)
    try:
        with pytest.raises(CorralError) as grpc_err:
            await asyncio.to_thread(grpc_api.cancel_jobs, {"filter": {"jobIds": ["1"]}})
    finally:
        grpc_api.close()
    assert type(grpc_err.value) is cls and grpc_err.value.message == f"{name} from CancelJobs"

    # gRPC: status, details and the class in the trailing metadata
    async with grpc.aio.insecure_channel(servers.grpc_target) as channel:
        stub = channel.unary_unary(
            f"/{CONTROLLER}/GetJobs",
            request_serializer=pb.GetJobsRequest.SerializeToString,
            response_deserializer=pb.GetJobsResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as rpc_err:
            await stub(pb.GetJobsRequest(), metadata=((RAISE_KEY, name),))
    err = rpc_err.value
    assert err.code() == getattr(grpc.StatusCode, cls.grpc_code)
    assert err.details() == f"{name} from GetJobs"
    trailing = dict(err.trailing_metadata() or ())
    assert trailing[ERROR_METADATA_KEY] == name
    assert type(from_wire(trailing[ERROR_METADATA_KEY], err.details() or "")) is cls


async def test_step_busy_is_not_an_internal_error(servers: Servers) -> None:
    status, body = await asyncio.to_thread(
        http_post, servers.http_address, "CreateStep", b"{}", "StepBusy"
    )
    assert (status, body["code"]) == (429, "RESOURCE_EXHAUSTED")
    assert StepBusy.http_status == 429


async def test_garbled_requests_are_invalid_on_both_transports(servers: Servers) -> None:
    status, body = await asyncio.to_thread(
        http_post, servers.http_address, "SubmitJob", b'{"spec": {', "StepBusy"
    )
    assert (status, body["error"]) == (400, "InvalidRequest")
    good = pb.SubmitJobRequest(spec=pb.JobSpec(script="#!/bin/sh\n" * 20)).SerializeToString()
    async with grpc.aio.insecure_channel(servers.grpc_target) as channel:
        raw = channel.unary_unary(f"/{CONTROLLER}/SubmitJob")  # bytes in, bytes out
        for garbled in (good[: len(good) // 2], b"\xff\xff\xff\xff"):
            with pytest.raises(grpc.aio.AioRpcError) as rpc_err:
                await raw(garbled, metadata=((RAISE_KEY, "StepBusy"),))
            assert rpc_err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed SubmitJobRequest" in (rpc_err.value.details() or "")
            trailing = dict(rpc_err.value.trailing_metadata() or ())
            assert trailing[ERROR_METADATA_KEY] == InvalidRequest.__name__


async def test_no_controller_is_controller_unavailable_on_both_transports() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(ControllerUnavailable):
        await asyncio.to_thread(HttpController(("127.0.0.1", port), timeout=5).get_nodes, {})
    api = GrpcController(f"127.0.0.1:{port}", timeout=5)
    try:
        with pytest.raises(ControllerUnavailable, match="Unable to contact slurm controller"):
            await asyncio.to_thread(api.get_nodes, {})
    finally:
        api.close()
