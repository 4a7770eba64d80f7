"""Time, injected: the one clock ctld's and noded's timers read, sleep and wait on.

A ``Clock`` is called for the time (seconds since the epoch, like ``time.time()``),
has ``monotonic()`` for durations that must not jump with the wall clock (how long
noded has not heard ctld: a stepped clock must not fence a node), an awaitable
``sleep`` (ctld's loops: the scheduler, the heartbeat check, the outbox's retries,
mail; noded's: heartbeats, its outbox, the self-fence watch, the samplers) and
``call_later``, a callback after a delay that returns a cancellable ``Timer`` (noded's
time limits, ``--signal`` warnings, kill grace times); ``wait_event`` waits for an
event or a time on it. Daemons get ``SystemClock``; tests get ``ManualClock``, whose
time moves only when the test calls ``advance``, which runs every timer and wakes
every sleeper that falls due on the way, in time order. So a test of a timer (a
heartbeat timeout, a time limit, a self-fence) runs without waiting in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


class Timer(Protocol):
    def cancel(self) -> None: ...


@runtime_checkable
class Clock(Protocol):
    def __call__(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer: ...


class SystemClock:
    """The real time, asyncio's sleep and the running loop's timers."""

    def __call__(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class ManualTimer:
    """A ManualClock's timer: cancelled, it never runs."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that stands still until ``advance`` moves it (tests only).

    ``now`` is the time (a test may read it, or set it back and forth directly; only
    ``advance`` runs timers and wakes sleepers).
    """

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self._seq = itertools.count()  # equal times: in the order they were set
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._timers: list[tuple[float, int, ManualTimer, Callable[..., Any], tuple[Any, ...]]] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now  # it never jumps: only ``advance`` or the test moves it

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), fut))
        await fut

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = ManualTimer()
        when = self.now + max(delay, 0.0)
        heapq.heappush(self._timers, (when, next(self._seq), timer, callback, args))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``: every timer due by then runs (at its own time,
        so what it reads and sets later is measured from there) and every sleeper due
        by then is woken, in time order. A timer may set another: it runs too if due."""
        until = self.now + seconds
        while True:
            sleeper = self._sleepers[0][:2] if self._sleepers else None
            timer = self._timers[0][:2] if self._timers else None
            first = min((t for t in (sleeper, timer) if t is not None), default=None)
            if first is None or first[0] > until:
                break
            self.now = max(self.now, first[0])
            if first == sleeper:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)  # the sleeper runs when the loop next turns
            else:
                _, _, handle, callback, args = heapq.heappop(self._timers)
                if not handle.cancelled:
                    callback(*args)
        self.now = until

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting for the clock (cancelled ones included until due)."""
        return sum(1 for *_, fut in self._sleepers if not fut.done())

    async def run_for(self, seconds: float, step: float) -> None:
        """Advance ``seconds`` in ``step``s, letting woken loops run after each step."""
        end = self.now + seconds
        while self.now < end:
            self.advance(min(step, end - self.now))
            for _ in range(10):  # let woken tasks run, and what they await in turn
                await asyncio.sleep(0)


async def wait_event(clock: Clock, event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass on ``clock``, whichever is first:
    True when the event was set (``asyncio.wait_for`` on the clock)."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    timeout = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((waiter, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, timeout):
            task.cancel()
        await asyncio.gather(waiter, timeout, return_exceptions=True)
    return event.is_set()
