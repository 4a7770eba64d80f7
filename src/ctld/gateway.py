"""ctld's HTTP/JSON gateway: the Controller service for clients that avoid gRPC.

``POST /corral.v1.Controller/<Method>`` with the request message in proto3's JSON
mapping returns the response message the same way; errors return a JSON object
``{"error": <CorralError class>, "code": <gRPC status>, "message": ...}`` with the
class's own ``http_status`` (corral/errors.py holds the one table). The short-lived
commands use it (a Python command that imports grpc cannot start in under ~200 ms);
the proto stays the one schema.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from aiohttp import web
from google.protobuf import json_format

from corral.auth.peercred import peer_credentials
from corral.errors import CorralError, InvalidRequest, TooLarge
from corral.limits import MAX_REQUEST_BYTES
from ctld.auth import Caller

if TYPE_CHECKING:
    from collections.abc import Mapping

    from google.protobuf.message import Message


class GatewayApi(Protocol):
    """What the gateway calls: ControllerApi, or ctld.standby's Switch in front of it."""

    @property
    def methods(self) -> Mapping[str, tuple[type[Message], Any]]: ...

    async def call_json(self, method: str, request: Message, caller: Caller) -> bytes: ...


log = structlog.get_logger("ctld.gateway")
MAX_BODY = MAX_REQUEST_BYTES


def _error(exc: CorralError) -> web.Response:
    body = {"error": type(exc).__name__, "code": exc.grpc_code, "message": exc.message}
    return web.json_response(body, status=exc.http_status)


def _caller(request: web.Request, method: str) -> Caller:
    """Metadata, plus the kernel's uid/gid when the request came over the Unix socket."""
    metadata = {k.lower(): v for k, v in request.headers.items()}
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None and sock.family == socket.AF_UNIX:
        _pid, uid, gid = peer_credentials(sock)
        return Caller(metadata=metadata, method=method, peer_uid=uid, peer_gid=gid)
    return Caller(metadata=metadata, method=method)


def make_app(api: GatewayApi) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        entry = api.methods.get(method)
        if entry is None:
            return _error(InvalidRequest(f"unknown method {method!r}"))
        req_type, _ = entry
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            size = request.content_length or 0
            return _error(
                TooLarge(f"the request ({size} bytes) is larger than the limit of {MAX_BODY} bytes")
            )
        try:
            message = req_type()
            if raw.strip():
                json_format.Parse(raw, message, ignore_unknown_fields=False, max_recursion_depth=32)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
            return _error(InvalidRequest(f"malformed {req_type.__name__}: {exc}"))
        try:
            payload = await api.call_json(method, message, _caller(request, method))
        except CorralError as exc:
            return _error(exc)
        except Exception:
            log.exception("gateway handler failed", method=method)
            return _error(CorralError("internal error in ctld (see its log)"))
        return web.Response(body=payload, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/corral.v1.Controller/{method}", handle)
    return app
