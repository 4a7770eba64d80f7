"""The typed Controller client: one method per RPC, over HTTP/JSON or gRPC.

``Controller`` (generated into corral/wire/controller.py from the proto) has one method
per Controller RPC, taking and returning the message in proto3's JSON mapping as a
TypedDict of corral/wire/json_types.py::

    api = connect()                                   # HTTP/JSON: the commands
    reply = api.submit_job({"spec": spec})            # t.SubmitJobResponse
    api = connect(grpc=True)                          # gRPC: srun, salloc, tools

Both transports attach credentials the same way (their ``headers(method)``, built by
``corral.rest.credential_headers``: the one place a credential is attached; nothing is
needed on ctld's Unix socket, where the kernel says who calls) and
rebuild a failure as the CorralError class ctld raised (``from_wire``: the gateway's
JSON ``error`` field, or gRPC's ``x-corral-error`` trailing metadata). Importing this
module costs no grpc or protobuf: the gRPC transport imports them when it is made.
"""

from __future__ import annotations

import os

from corral.errors import ERROR_METADATA_KEY, ControllerUnavailable, CorralError, from_wire
from corral.identity import Identity, current_identity
from corral.rest import (
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    controller_address,
    controller_socket,
    credential_headers,
    post,
)
from corral.wire.controller import ControllerCalls

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

GRPC_ADDRESS_ENV = "CORRAL_CTLD_GRPC"


def _timeout(timeout: float | None) -> float:
    return timeout or float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


class Controller(ControllerCalls):
    """The typed client surface, whatever the transport: who calls, and the metadata
    every request carries besides its message."""

    identity: Identity  # who this process is (commands fill filters with it); never sent
    timeout: float
    token: str | None = None

    def headers(self, method: str) -> list[tuple[str, str]]:
        """The one place a request's credentials are attached."""
        return credential_headers(method, self.token)


class HttpController(Controller):
    """The Controller over ctld's HTTP/JSON gateway (standard library only): each call
    is one request on one short connection."""

    def __init__(
        self,
        address: tuple[str, int] | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
        *,
        socket_path: str | None = None,
        token: str | None = None,
    ) -> None:
        if socket_path is None and address is None:
            socket_path = controller_socket()
        self.socket_path = socket_path or ""
        self.address = address or (("", 0) if self.socket_path else controller_address())
        self.identity = identity or current_identity()
        self.timeout = _timeout(timeout)
        self.token = token

    def headers(self, method: str) -> list[tuple[str, str]]:
        return [] if self.socket_path else super().headers(method)

    def call(self, method: str, request: Any) -> Any:
        target = self.socket_path or self.address
        return post(target, method, request, self.headers(method), self.timeout)


def grpc_target() -> str:
    """host:port of ctld's gRPC server: $CORRAL_CTLD_GRPC, else the config file."""
    value = os.environ.get(GRPC_ADDRESS_ENV)
    if value:
        return value
    from corral.config import load_config

    try:
        ctl = load_config().controller
    except CorralError as exc:
        raise ControllerUnavailable(
            f"cannot find the controller: set {GRPC_ADDRESS_ENV} or CORRAL_CONF ({exc})"
        ) from None
    return f"{ctl.host}:{ctl.grpc_port}"


class GrpcController(Controller):
    """The Controller over gRPC: one channel, requests and replies as proto3 JSON dicts."""

    def __init__(
        self,
        target: str | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
        *,
        token: str | None = None,
    ) -> None:
        import grpc
        from google.protobuf import json_format

        from corral.wire import corral_pb2
        from corral.wire.methods import CONTROLLER, SERVICES

        self._grpc, self._json, self._pb = grpc, json_format, corral_pb2
        self._methods, self._service = SERVICES[CONTROLLER], CONTROLLER
        self.target = target or grpc_target()
        self.identity = identity or current_identity()
        self.timeout = _timeout(timeout)
        self.token = token
        self._channel = grpc.insecure_channel(self.target)

    def call(self, method: str, request: Any) -> Any:
        req_name, resp_name, _, _ = self._methods[method]
        req_type, resp_type = getattr(self._pb, req_name), getattr(self._pb, resp_name)
        try:
            message = self._json.ParseDict(request, req_type())
        except self._json.ParseError as exc:
            from corral.errors import InvalidRequest

            raise InvalidRequest(f"malformed {req_name}: {exc}") from None
        stub = self._channel.unary_unary(
            f"/{self._service}/{method}",
            request_serializer=req_type.SerializeToString,
            response_deserializer=resp_type.FromString,
        )
        try:
            reply = stub(message, metadata=tuple(self.headers(method)), timeout=self.timeout)
        except self._grpc.RpcError as exc:
            raise error_from_rpc(exc, self.target) from None
        return self._json.MessageToDict(reply)

    def close(self) -> None:
        self._channel.close()


def error_from_rpc(exc: Any, target: str = "") -> CorralError:
    """The CorralError a failed gRPC call stands for (``exc``: a grpc.RpcError)."""
    details = exc.details() if hasattr(exc, "details") else str(exc)
    trailing = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    name = trailing.get(ERROR_METADATA_KEY)
    if name:
        return from_wire(str(name), details or "")
    code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):  # never reached ctld's handlers
        return ControllerUnavailable(
            f"Unable to contact slurm controller (connect failure) at {target}: {details}"
        )
    return CorralError(details or code)


def connect(
    *,
    grpc: bool = False,
    identity: Identity | None = None,
    timeout: float | None = None,
) -> Controller:
    """The Controller client the environment points at (see ``controller_address`` and
    ``grpc_target``): HTTP/JSON unless ``grpc``. ctld's Unix socket wins whenever there
    is one: only there does the kernel vouch for the caller without a credential."""
    socket_path = controller_socket()
    if socket_path:
        return HttpController(identity=identity, timeout=timeout, socket_path=socket_path)
    if grpc:
        return GrpcController(identity=identity, timeout=timeout)
    return HttpController(identity=identity, timeout=timeout)


__all__ = [
    "Controller",
    "GrpcController",
    "HttpController",
    "connect",
    "error_from_rpc",
    "grpc_target",
]
