"""The HTTP gateway's TCP connections before the caller is known (docs/security.md,
"Requests before the caller is known").

Anyone who reaches ctld's HTTP port can open connections to it. Until a request on a
connection has authenticated, the connection holds a place (corral.peers): at most
``UNPROVEN_PER_PEER`` per peer address (all of loopback is one peer) and
``UNPROVEN_TOTAL`` in all. One past either is answered 503 and closed before anything
it sends is read, and a connection still unproven ``UNPROVEN_DEADLINE_S`` after it was
accepted is cut. Once a request on it authenticates (``Guard.proven``), it no longer
counts. With TLS the handshake itself must end within the same deadline.

aiohttp has no hook at accept, so ``GuardedSite`` listens itself and puts a thin
protocol (``_Guarded``) in front of aiohttp's own: it takes the place, arms the
deadline and forwards everything else untouched.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from corral.peers import Places, peer_key

log = structlog.get_logger("ctld.api.gateway")

UNPROVEN_PER_PEER = 32
UNPROVEN_TOTAL = 512
UNPROVEN_DEADLINE_S = 10.0
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)


class Guard:
    """The places of unproven connections, and which connection holds which."""

    def __init__(
        self,
        per_peer: int = UNPROVEN_PER_PEER,
        total: int = UNPROVEN_TOTAL,
        deadline_s: float = UNPROVEN_DEADLINE_S,
    ) -> None:
        self.places = Places(per_peer, total)
        self.deadline_s = deadline_s
        self.holding: dict[Any, _Guarded] = {}  # transport -> its guard

    def proven(self, transport: Any) -> None:
        """A request on ``transport`` authenticated: it no longer holds a place."""
        conn = self.holding.pop(transport, None)
        if conn is not None:
            conn.release()

    def factory(self, make: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(self, make)

    def _refused(self, key: str, why: str) -> None:
        if self.places.turned_away(key, time.monotonic()):
            log.warning("gateway connection turned away", peer=key, why=why)


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol behind a place: taken at accept, given back when proven or closed."""

    def __init__(self, guard: Guard, make: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self.make = make
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.key = ""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        key = peer_key(transport.get_extra_info("peername"))
        why = self.guard.places.take(key)
        if why:
            self.guard._refused(key, why)
            said = {"error": "ControllerUnavailable", "code": "UNAVAILABLE", "message": why}
            body = json.dumps(said).encode()
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_BUSY % (len(body), body))
            transport.close()
            return
        self.key = key
        self.guard.holding[transport] = self
        self.timer = asyncio.get_running_loop().call_later(self.guard.deadline_s, self._expire)
        self.inner = self.make()
        self.inner.connection_made(transport)

    def _expire(self) -> None:
        self.timer = None
        if self.transport is not None and self.key:
            self.transport.abort()  # type: ignore[attr-defined]

    def release(self) -> None:
        if self.key:
            self.guard.places.give_back(self.key)
            self.key = ""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.holding.pop(self.transport, None)
        self.release()
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class GuardedSite(web.BaseSite):
    """web.TCPSite with each connection behind the guard."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: Guard,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self.host, self.port, self.guard = host, port, guard

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard.factory(server),
            self.host,
            self.port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            ssl_handshake_timeout=self.guard.deadline_s if self._ssl_context else None,
        )
