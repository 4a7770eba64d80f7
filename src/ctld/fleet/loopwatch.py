"""How long ctld's event loop could not run: what a node's silence must not be blamed for.

Node heartbeats are applied on the event loop, and a node's liveness is the time since
ctld last applied one. If the loop is held (a long callback, a GC pause, a machine
swapping), heartbeats that did arrive wait in the socket buffers, and the first check
after the stall would find every node silent and declare it DOWN, requeueing jobs that
were running fine. So a watch ticks on the real clock; a tick that comes late by more
than ``STALL_S`` adds the lateness to ``deaf_s``, and the heartbeat check subtracts the
deafness since a node's last heartbeat from its silence. A node is then declared DOWN
after ``heartbeat.timeout_s`` of ctld listening, not of ctld stalled.

Runs only on the real clock (ctld's server); under a test's ManualClock nothing ticks
and ``deaf_s`` stays 0.
"""

from __future__ import annotations

import asyncio
import time

TICK_S = 0.1
STALL_S = 0.5  # a loop late by less is busy, not deaf: heartbeats are timed in seconds


class LoopWatch:
    def __init__(self) -> None:
        self.deaf_s = 0.0
        self._last: float | None = None  # None: not watching

    def tick(self) -> float:
        """Account for the time since the last tick; the deafness so far."""
        if self._last is not None:
            now = time.monotonic()
            late = now - self._last - TICK_S
            if late > STALL_S:
                self.deaf_s += late
            self._last = now
        return self.deaf_s

    async def run(self) -> None:
        self._last = time.monotonic()
        try:
            while True:
                await asyncio.sleep(TICK_S)
                self.tick()
        finally:
            self._last = None
