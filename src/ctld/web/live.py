"""Live updates: each open page holds a Server-Sent Events stream; when what its view
shows may have changed, ctld renders the view again and sends it if it differs.

What changed is read, not pushed: a view's *generation* is a few counters ctld keeps
anyway (the state's version, the scheduler's passes, the GPU samples' count, and the
clock's half minute for the times a page shows), checked every ``TICK_S`` per open
page. A rendering is shared by every page that shows the same view to viewers who may
see the same things (``Renders``: one per key and generation, at most one per key every
``web.refresh_s``), so ten pages of the queue cost one rendering per change, not ten.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ctld.web.html import Html

TICK_S = 0.2
PING_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
MAX_RENDERS = 512  # cached renderings (view, viewer class)

Generation = tuple[int, ...]


@dataclass
class _Entry:
    generation: Generation
    at: float
    title: str
    html: Html


class Renders:
    """The last rendering of each (view, viewer class); one rendering at a time per key."""

    def __init__(self, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[_Entry]] = {}
        self.renders = 0  # how many renderings were made (bench/web.py reads it)

    async def get(
        self,
        key: tuple[str, str],
        generation: Generation,
        render: Callable[[], Awaitable[tuple[str, Html]]],
        *,
        live: bool = False,
    ) -> tuple[str, Html]:
        """The rendering of ``key`` at ``generation``. ``live`` (a stream's tick): one
        made less than refresh_s ago is good enough even if the generation moved since;
        the stream sends the newer one at a later tick. A page load gets the latest."""
        entry = self._entries.get(key)
        now = self.clock()
        if entry is not None and (
            entry.generation == generation or (live and now - entry.at < self.refresh_s)
        ):
            self._entries.move_to_end(key)
            return entry.title, entry.html
        running = self._inflight.get(key)
        if running is not None:
            done = await asyncio.shield(running)
            return done.title, done.html
        future: asyncio.Future[_Entry] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            title, html = await render()
            self.renders += 1
            made = _Entry(generation, self.clock(), title, html)
            self._entries[key] = made
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_RENDERS:
                self._entries.popitem(last=False)
            future.set_result(made)
            return title, html
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when unshared
            raise
        finally:
            del self._inflight[key]


def sse(event: str, data: str) -> bytes:
    """One Server-Sent Event; every line of ``data`` gets its own ``data:`` field."""
    lines = data.split("\n")
    return (f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()
