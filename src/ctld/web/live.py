"""Live updates: each open page holds a Server-Sent Events stream; when what its view
shows may have changed, ctld renders the view again and sends it if it differs.

What changed is read, not pushed: a view's *generation* is a few counters ctld keeps
anyway (the state's version, the scheduler's passes, for GPU views the heartbeat
interval, and the clock's half minute for the times a page shows), checked every
``TICK_S`` per open page. A rendering is shared by every page that shows the same view
to viewers who may see the same things (``Renders``), so ten pages of the queue cost
one rendering per change, not ten. An out-of-date rendering is redone for a stream
once it is older than five times what it cost (a cheap view: at the next tick; at most
``web.refresh_s``), and only while the renderings of the last second took less than
``BUDGET`` of a core: however many pages are open and however fast the cluster
changes, the page costs ctld at most that; beyond it, pages update less often.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ctld.web.html import Html

TICK_S = 0.2
BUDGET = 0.25  # of a core: what live pages' renderings may take, over the last second
PING_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
MAX_RENDERS = 512  # cached renderings (view, viewer class)

Generation = tuple[int, ...]


@dataclass
class Rendering:
    generation: Generation  # what the view's generation was when it was made
    at: float
    title: str
    html: Html
    cost: float = 0.0  # seconds it took to make


class Renders:
    """The last rendering of each (view, viewer class); one rendering at a time per key."""

    def __init__(self, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], Rendering] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[Rendering]] = {}
        self._costs: deque[tuple[float, float]] = deque()  # (when, cost) of the last second
        self.renders = 0  # how many renderings were made (bench/web.py reads it)

    async def get(
        self,
        key: tuple[str, str],
        generation: Generation,
        render: Callable[[], Awaitable[tuple[str, Html]]],
        *,
        live: bool = False,
    ) -> Rendering:
        """The rendering of ``key`` at ``generation``. ``live`` (a stream's tick): an
        older one may come back (its own generation says so: the stream asks again at a
        later tick) while redoing it is not yet due (``_due``). A page load gets the
        latest."""
        entry = self._entries.get(key)
        now = self.clock()
        if entry is not None and (
            entry.generation == generation or (live and not self._due(entry, now))
        ):
            self._entries.move_to_end(key)
            return entry
        running = self._inflight.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Rendering] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            started = time.perf_counter()
            title, html = await render()
            cost = time.perf_counter() - started
            self.renders += 1
            made = Rendering(generation, self.clock(), title, html, cost)
            self._costs.append((made.at, cost))
            self._entries[key] = made
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_RENDERS:
                self._entries.popitem(last=False)
            future.set_result(made)
            return made
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when unshared
            raise
        finally:
            del self._inflight[key]

    def _due(self, entry: Rendering, now: float) -> bool:
        """Whether a stream may have an out-of-date rendering redone now."""
        wait = min(self.refresh_s, max(TICK_S, 5 * entry.cost))
        if now - entry.at < wait:
            return False
        while self._costs and self._costs[0][0] < now - 1.0:
            self._costs.popleft()
        return sum(c for _, c in self._costs) < BUDGET


# the Server-Sent Events format's line ends: CRLF, a lone CR and a lone LF all end a
# line (WHATWG HTML, "Parsing an event stream"): splitting on "\n" alone would let a CR
# in a job name end a data line and start a field of its own (an event of its choosing)
LINE_END = re.compile(r"\r\n|\r|\n")
EVENT_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


def sse(event: str, data: str) -> bytes:
    """One Server-Sent Event; every line of ``data`` gets its own ``data:`` field, so any
    text (a job name with CR, LF or CRLF in it) arrives as data, in this one event (a
    browser joins the fields with LF: a CR or CRLF comes back as LF, as HTML reads it
    anyway). The name is the caller's constant, never text a user chose."""
    if not EVENT_NAME.fullmatch(event):
        raise ValueError(f"not an event name: {event!r}")
    lines = LINE_END.split(data)
    text = f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"
    return text.encode("utf-8", errors="replace")  # a lone surrogate: "?", not a crash
