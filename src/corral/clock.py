"""Time, injected: what the daemons' timers read and sleep on.

A clock is called for the time (seconds since the epoch, like ``time.time()``) and has
an awaitable ``sleep``. Daemons get ``SystemClock``; tests get ``ManualClock``, whose
time moves only when the test calls ``advance``, which also wakes every sleeper whose
time has come. So a test of a timer (a heartbeat timeout, a time limit) runs without
waiting in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def __call__(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real time, and asyncio's sleep."""

    def __call__(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that stands still until ``advance`` moves it (tests only)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and wake every sleeper that is due by then."""
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

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
