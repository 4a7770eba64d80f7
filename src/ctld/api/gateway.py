"""ctld's HTTP/JSON gateway: the Controller service for clients that avoid gRPC.

``POST /corral.v1.Controller/<Method>`` with the request message in proto3's JSON
mapping returns the response message the same way; errors return a JSON object
``{"error": <CorralError class>, "code": <gRPC status>, "message": ...}`` with the
class's own ``http_status`` (corral/errors.py holds the one table). The short-lived
commands use it (a Python command that imports grpc cannot start in under ~200 ms);
the proto stays the one schema.

Who calls is settled before the body is read (docs/security.md, "Requests before the
caller is known"): the caller comes from the headers and the socket alone, and a
request that does not authenticate is answered at once, its body never parsed. A body
is at most ``MAX_BODY`` (a larger Content-Length is refused unread); a large one is
parsed in a worker thread, one per user and ``PARSE_THREADS`` in all at a time, so a
user's 8 MB of JSON never holds the event loop that node heartbeats are answered on.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from aiohttp import web
from google.protobuf import json_format

from corral import __version__
from corral.auth.peercred import peer_credentials
from corral.errors import CorralError, InvalidRequest, TooLarge
from corral.limits import MAX_REQUEST_BYTES
from corral.rest import VERSION_KEY
from ctld.api.auth import Caller
from ctld.codec import fieldmask
from ctld.control import versions

if TYPE_CHECKING:
    from collections.abc import Mapping

    from google.protobuf.message import Message

    from corral.identity import Identity
    from ctld.api.unproven import Guard


class GatewayApi(Protocol):
    """What the gateway calls: ControllerApi, or ctld.api.standby's Switch in front of it."""

    @property
    def methods(self) -> Mapping[str, tuple[type[Message], Any]]: ...

    def identify(self, caller: Caller) -> Identity: ...

    async def call_json(self, method: str, request: Message, who: Identity) -> bytes: ...


log = structlog.get_logger("ctld.api.gateway")
MAX_BODY = MAX_REQUEST_BYTES
INLINE_PARSE_BYTES = 64 * 1024  # smaller bodies parse on the loop: a thread costs more
PARSE_THREADS = 2  # large bodies parsing at once, all users together


def _error(exc: CorralError, *, close: bool = False) -> web.Response:
    body = {"error": type(exc).__name__, "code": exc.grpc_code, "message": exc.message}
    response = web.json_response(body, status=exc.http_status)
    if close:  # the body was not read: the connection cannot carry another request
        response.force_close()
    return response


def _caller(request: web.Request, method: str) -> Caller:
    """Metadata, plus the kernel's uid/gid when the request came over the Unix socket."""
    metadata = {k.lower(): v for k, v in request.headers.items()}
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None and sock.family == socket.AF_UNIX:
        _pid, uid, gid = peer_credentials(sock)
        return Caller(metadata=metadata, method=method, peer_uid=uid, peer_gid=gid)
    return Caller(metadata=metadata, method=method)


def _parse(req_type: type[Message], raw: bytes) -> Message:
    message = req_type()
    if raw.strip():
        json_format.Parse(raw, message, ignore_unknown_fields=False, max_recursion_depth=32)
    return message


class _Parsing:
    """Large bodies parse in threads: one per user at a time, PARSE_THREADS in all (a
    thread still shares the GIL, so their number bounds what they take from the loop)."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(PARSE_THREADS)
        self.users: dict[int, tuple[asyncio.Lock, int]] = {}

    async def parse(self, req_type: type[Message], raw: bytes, uid: int) -> Message:
        if len(raw) <= INLINE_PARSE_BYTES:
            return _parse(req_type, raw)
        lock, waiting = self.users.get(uid) or (asyncio.Lock(), 0)
        self.users[uid] = (lock, waiting + 1)
        try:
            async with lock, self.slots:
                return await asyncio.to_thread(_parse, req_type, raw)
        finally:
            lock, waiting = self.users[uid]
            if waiting <= 1:
                del self.users[uid]
            else:
                self.users[uid] = (lock, waiting - 1)


def make_app(api: GatewayApi, guard: Guard | None = None) -> web.Application:
    parsing = _Parsing()

    async def handle(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        entry = api.methods.get(method)
        if entry is None:
            return _error(InvalidRequest(f"unknown method {method!r}"), close=True)
        req_type, _ = entry
        try:  # before a byte of the body is read
            who = api.identify(_caller(request, method))
        except CorralError as exc:
            return _error(exc, close=True)
        if guard is not None:
            guard.proven(request.transport)
        size = request.content_length
        if size is not None and size > MAX_BODY:
            return _error(_too_large(size), close=True)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(_too_large(request.content_length or 0), close=True)
        try:
            message = await parsing.parse(req_type, raw, who.uid)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
            why = f"malformed {req_type.__name__}: {exc}"
            return _error(InvalidRequest(why + _newer_hint(request.headers.get(VERSION_KEY))))
        try:
            if "fields" in request.query:  # the JSON API's ?fields=jobId,state
                fieldmask.from_query(method, message, request.query["fields"])
            payload = await api.call_json(method, message, who)
        except CorralError as exc:
            return _error(exc)
        except Exception:
            log.exception("gateway handler failed", method=method)
            return _error(CorralError("internal error in ctld (see its log)"))
        return web.Response(body=payload, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/corral.v1.Controller/{method}", handle)
    return app


def _newer_hint(version: str | None) -> str:
    """Why a newer command's request may not parse here: it uses a field this ctld
    does not know (docs/upgrading.md: ctld is upgraded first)."""
    if not version or versions.judge(version) not in (versions.NEWER, versions.NEWER_MAJOR):
        return ""
    return f" (the command is corral {version[:64]}, ctld {__version__}: upgrade ctld first)"


def _too_large(size: int) -> TooLarge:
    return TooLarge(f"the request ({size} bytes) is larger than the limit of {MAX_BODY} bytes")
