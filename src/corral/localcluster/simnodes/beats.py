"""Heartbeats of many simulated nodes, sent together (NodeController.Heartbeats).

Each simulated node keeps its own loop (its interval, its beat at once after a job
change, its registration); only the sending is shared: a beat waits at most
``window_s`` for others and goes in one call with them. One gRPC call costs ctld far
more than the heartbeat it carries (~0.7 ms against ~2 us), so at 12,500 nodes one
call per beat would be most of a core of ctld's (bench/README.md, issue 29).
"""

from __future__ import annotations

import asyncio

from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg


class HeartbeatBatcher:
    def __init__(
        self,
        stub: pbg.NodeControllerAsyncStub,
        timeout_s: float,
        *,
        window_s: float = 0.05,
        max_batch: int = 2000,
    ) -> None:
        self.stub = stub
        self.timeout_s = timeout_s
        self.window_s = window_s
        self.max_batch = max_batch
        self.calls = 0
        self._queue: list[tuple[pb.HeartbeatRequest, asyncio.Future[bool]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def beat(self, beat: pb.HeartbeatRequest) -> bool:
        """Send ``beat`` with the others due now; True: ctld wants the node to register
        again. A failed call raises its grpc.RpcError in every beat it carried."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self._queue.append((beat, done))
        if len(self._queue) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return await done

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._queue = self._queue, []
        if batch:
            task = asyncio.ensure_future(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[pb.HeartbeatRequest, asyncio.Future[bool]]]) -> None:
        request = pb.HeartbeatBatch(beats=[beat for beat, _ in batch])
        try:
            reply = await self.stub.Heartbeats(request, timeout=self.timeout_s)
        except Exception as exc:  # a grpc.RpcError, raised in each beat's own loop
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        self.calls += 1
        again = set(reply.reregister)
        for beat, done in batch:
            if not done.done():
                done.set_result(beat.name in again)
