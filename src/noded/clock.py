"""noded's clock: wall time and timers, injected so tests can run them on virtual time.

The launcher's timers (the time limit, the ``--signal`` warning) and windows (idle
GPUs, progress stalls) read and schedule through a ``Clock``. ``RealClock`` is the
event loop's; ``ManualClock`` fires due timers when a test advances it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class _ManualTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Virtual time: ``advance`` moves it and runs the timers that fall due, in order."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start
        self._seq = itertools.count()
        self._due: list[tuple[float, int, _ManualTimer, Callable[..., Any], tuple[Any, ...]]] = []

    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = _ManualTimer()
        heapq.heappush(
            self._due, (self.t + max(delay, 0.0), next(self._seq), timer, callback, args)
        )
        return timer

    def advance(self, seconds: float) -> None:
        until = self.t + seconds
        while self._due and self._due[0][0] <= until:
            when, _, timer, callback, args = heapq.heappop(self._due)
            self.t = when
            if not timer.cancelled:
                callback(*args)
        self.t = until
