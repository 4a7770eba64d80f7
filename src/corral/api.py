"""The typed Controller client: one method per RPC, over HTTP/JSON or gRPC.

``Controller`` (generated into corral/wire/controller.py from the proto) has one method
per Controller RPC, taking and returning the message in proto3's JSON mapping as a
TypedDict of corral/wire/json_types.py::

    api = connect()                                   # HTTP/JSON: the commands
    reply = api.submit_job({"spec": spec})            # t.SubmitJobResponse
    api = connect(grpc=True)                          # gRPC: srun, salloc, tools

Both transports send the caller's identity the same way (their ``headers()``, built by
``corral.identity.identity_metadata``: the one place a credential is attached) and
rebuild a failure as the CorralError class ctld raised (``from_wire``: the gateway's
JSON ``error`` field, or gRPC's ``x-corral-error`` trailing metadata). Importing this
module costs no grpc or protobuf: the gRPC transport imports them when it is made.
"""

from __future__ import annotations

import os

from corral.errors import ERROR_METADATA_KEY, ControllerUnavailable, CorralError, from_wire
from corral.identity import Identity, current_identity, identity_metadata
from corral.rest import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, controller_address, post
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

    identity: Identity
    timeout: float

    def headers(self) -> list[tuple[str, str]]:
        """The one place a request's credentials are attached (today: the identity)."""
        return identity_metadata(self.identity)


class HttpController(Controller):
    """The Controller over ctld's HTTP/JSON gateway (standard library only): each call
    is one request on one short connection."""

    def __init__(
        self,
        address: tuple[str, int] | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
    ) -> None:
        self.address = address or controller_address()
        self.identity = identity or current_identity()
        self.timeout = _timeout(timeout)

    def call(self, method: str, request: Any) -> Any:
        return post(self.address, method, request, self.headers(), self.timeout)


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
            reply = stub(message, metadata=tuple(self.headers()), timeout=self.timeout)
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
    ``grpc_target``): HTTP/JSON unless ``grpc``."""
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
