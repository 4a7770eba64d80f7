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

from corral import __version__
from corral.errors import (
    ERROR_METADATA_KEY,
    ControllerUnavailable,
    CorralError,
    NotPrimary,
    Unauthenticated,
    from_wire,
)
from corral.identity import Identity, current_identity
from corral.rest import (
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    VERSION_KEY,
    controller_socket,
    controller_targets,
    credential_headers,
    notice,
    post_any,
    unsent_credential,
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

    def metadata(self, method: str) -> tuple[tuple[str, str], ...]:
        """gRPC metadata: the credentials and the version (HTTP: corral.rest sends it)."""
        return (*self.headers(method), (VERSION_KEY, __version__))


class HttpController(Controller):
    """The Controller over ctld's HTTP/JSON gateway (standard library only): each call
    is one request on one short connection, to the first controller of the list that
    is primary (corral.rest.post_any)."""

    def __init__(
        self,
        address: tuple[str, int] | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
        *,
        socket_path: str | None = None,
        token: str | None = None,
        targets: list[tuple[str, int] | str] | None = None,
    ) -> None:
        if targets:
            self.targets: list[tuple[str, int] | str] = list(targets)
        elif socket_path:
            self.targets = [socket_path]
        elif address is not None:
            self.targets = [address]
        else:
            self.targets = controller_targets()
        self.socket_path = next((t for t in self.targets if isinstance(t, str)), "")
        self.address = next((t for t in self.targets if not isinstance(t, str)), ("", 0))
        self.identity = identity or current_identity()
        self.timeout = _timeout(timeout)
        self.token = token

    def call(self, method: str, request: Any) -> Any:
        def headers(target: tuple[str, int] | str) -> list[tuple[str, str]]:
            # over a Unix socket the kernel says who calls: no credential
            return [] if isinstance(target, str) else self.headers(method)

        try:
            reply, first = post_any(self.targets, method, request, headers, self.timeout)
        except Unauthenticated as exc:
            raise with_unsent_note(exc) from None
        if first:  # the primary is not the first: ask it first next time
            self.targets.insert(0, self.targets.pop(first))
        return reply


def grpc_targets() -> list[str]:
    """host:port of each controller's gRPC server, in order: $CORRAL_CTLD_GRPC
    (comma-separated), else the config file's controller.hosts."""
    value = os.environ.get(GRPC_ADDRESS_ENV)
    if value:
        return [v.strip() for v in value.split(",") if v.strip()]
    from corral.config import load_config

    try:
        ctl = load_config().controller
    except CorralError as exc:
        raise ControllerUnavailable(
            f"cannot find the controller: set {GRPC_ADDRESS_ENV} or CORRAL_CONF ({exc})"
        ) from None
    return [f"{c.host}:{c.grpc_port}" for c in ctl.controllers]


def grpc_target() -> str:
    """host:port of the first controller's gRPC server."""
    return grpc_targets()[0]


class GrpcController(Controller):
    """The Controller over gRPC: one channel per controller, requests and replies as
    proto3 JSON dicts; a call goes to the first controller that is primary."""

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
        self.targets = [target] if target else grpc_targets()
        self.target = self.targets[0]
        self.identity = identity or current_identity()
        self.timeout = _timeout(timeout)
        self.token = token
        self._channels = {t: grpc.insecure_channel(t) for t in self.targets}
        self._channel = self._channels[self.target]

    def call(self, method: str, request: Any) -> Any:
        req_name, resp_name, _, _ = self._methods[method]
        req_type, resp_type = getattr(self._pb, req_name), getattr(self._pb, resp_name)
        try:
            message = self._json.ParseDict(request, req_type())
        except self._json.ParseError as exc:
            from corral.errors import InvalidRequest

            raise InvalidRequest(f"malformed {req_name}: {exc}") from None
        if len(self.targets) == 1:
            return self._call_one(self.target, method, message, req_type, resp_type)
        import time

        started = time.monotonic()
        deadline = started + self.timeout
        waiting = False
        while True:
            failures = []
            for target in list(self.targets):
                # only a controller that can be reached gets the request: one that took
                # it and then failed may have done it, so it is never sent twice
                ready = self._grpc.channel_ready_future(self._channels[target])
                try:
                    ready.result(timeout=0.5)
                except self._grpc.FutureTimeoutError:
                    failures.append(f"{target}: cannot connect")
                    continue
                try:
                    reply = self._call_one(target, method, message, req_type, resp_type)
                except NotPrimary as exc:
                    failures.append(f"{target}: {exc}")
                    continue
                if target != self.targets[0]:  # ask the primary first next time
                    self.targets.remove(target)
                    self.targets.insert(0, target)
                    self.target = target
                if waiting:
                    notice(f"{target} answered after {time.monotonic() - started:.1f} s")
                return reply
            if time.monotonic() >= deadline:
                raise ControllerUnavailable(
                    "Unable to contact slurm controller (connect failure): no primary "
                    f"controller answered within {self.timeout:g} s: " + "; ".join(failures)
                )
            if not waiting:
                notice(
                    "Unable to contact slurm controller: no primary answers ("
                    + "; ".join(failures)
                    + f"); retrying for up to {self.timeout:g} s"
                )
                waiting = True
            time.sleep(0.1)

    def _call_one(
        self, target: str, method: str, message: Any, req_type: Any, resp_type: Any
    ) -> Any:
        stub = self._channels[target].unary_unary(
            f"/{self._service}/{method}",
            request_serializer=req_type.SerializeToString,
            response_deserializer=resp_type.FromString,
        )
        try:
            reply = stub(message, metadata=self.metadata(method), timeout=self.timeout)
        except self._grpc.RpcError as exc:
            error = error_from_rpc(exc, target)
            raise with_unsent_note(error) if isinstance(error, Unauthenticated) else error from None
        return self._json.MessageToDict(reply)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


def with_unsent_note(exc: Unauthenticated) -> Unauthenticated:
    """ctld's "no credential" refusal, with why this process sent none (what to set)."""
    why = unsent_credential()
    if not why or "no credential" not in exc.message:  # another refusal: as ctld said it
        return exc
    return Unauthenticated(f"{exc.message} ({why})")


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
    if controller_socket():  # every controller's socket that is there, in order
        return HttpController(identity=identity, timeout=timeout)
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
    "grpc_targets",
]
