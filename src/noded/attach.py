"""sattach's copies of a running step's output on this node, and its input.

The step's own stream (srun's) is never slowed or changed by them: each attached
sattach gets the chunks through a queue of its own, bounded; one that falls behind
is cut off (told why), never waited for. A new one first gets the step's recent
output again (the last REPLAY_BYTES), as Slurm's slurmstepd replays its message
cache to a new client, then what follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from noded.taskio import Chunk, Task

REPLAY_BYTES = 1 << 20  # recent output a new sattach sees first
REPLAY_CHUNKS = 128  # Slurm's STDIO_MAX_MSG_CACHE
LISTENER_DEPTH = 256  # chunks an attached sattach may lag before it is cut off


class FellBehind(Exception):
    pass


@dataclass(eq=False)  # hashed by identity: kept in a set
class Listener:
    queue: asyncio.Queue[Chunk | None] = field(
        default_factory=lambda: asyncio.Queue(LISTENER_DEPTH)
    )
    behind: bool = False


class Listeners:
    def __init__(self) -> None:
        self.recent: deque[Chunk] = deque()
        self.recent_bytes = 0
        self.attached: set[Listener] = set()
        self.exits: list[Chunk] = []  # tasks already ended here (a late sattach learns them)
        self.closed = False

    def publish(self, chunk: Chunk) -> None:
        if chunk.exit is not None:
            self.exits.append(chunk)
        else:
            self.recent.append(chunk)
            self.recent_bytes += len(chunk.data)
            while self.recent and (
                self.recent_bytes > REPLAY_BYTES or len(self.recent) > REPLAY_CHUNKS
            ):
                self.recent_bytes -= len(self.recent.popleft().data)
        for listener in list(self.attached):
            try:
                listener.queue.put_nowait(chunk)
            except asyncio.QueueFull:
                self._cut(listener)

    def _cut(self, listener: Listener) -> None:
        listener.behind = True
        self.attached.discard(listener)
        with contextlib.suppress(asyncio.QueueEmpty):
            listener.queue.get_nowait()  # room for the end marker
        listener.queue.put_nowait(None)

    def subscribe(self) -> Listener:
        listener = Listener(asyncio.Queue(LISTENER_DEPTH + len(self.recent) + len(self.exits) + 1))
        for chunk in (*self.recent, *self.exits):
            listener.queue.put_nowait(chunk)
        if self.closed:
            listener.queue.put_nowait(None)
        else:
            self.attached.add(listener)
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        self.attached.discard(listener)

    def close(self) -> None:
        """The step ended here: every attached sattach gets the end."""
        self.closed = True
        for listener in list(self.attached):
            self.attached.discard(listener)
            try:
                listener.queue.put_nowait(None)
            except asyncio.QueueFull:
                self._cut(listener)


async def write_stdin(tasks: list[Task], ranks: set[int] | None, data: bytes) -> None:
    """sattach's input to the tasks whose stdin is still open (``ranks``: only those)."""
    for task in tasks:
        if ranks is not None and task.rank not in ranks:
            continue
        fd = task.tty if task.tty >= 0 else task.gate_fd
        if fd < 0:
            continue
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.write, fd, data)
