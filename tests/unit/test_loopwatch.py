"""ctld.fleet.loopwatch: a stalled event loop is not the nodes' silence."""

from __future__ import annotations

import asyncio
import time

from corral.config import HeartbeatConfig, NodeConfig
from ctld.fleet.loopwatch import STALL_S, LoopWatch
from ctld.model import failures
from ctld.model.nodes import NodeRecord


async def test_a_stall_of_the_loop_is_counted_and_a_busy_loop_is_not() -> None:
    watch = LoopWatch()
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.3)
        assert watch.tick() == 0.0  # running on time
        time.sleep(STALL_S + 0.7)  # the loop held, as by a long callback
        stalled = watch.tick()  # the first look after it counts it, whoever looks
        assert stalled > STALL_S + 0.4
        await asyncio.sleep(0.3)
        assert watch.tick() == stalled  # counted once
    finally:
        task.cancel()
    assert LoopWatch().tick() == 0.0  # not watching: nothing counted


def test_a_node_is_not_blamed_for_the_time_ctld_was_deaf() -> None:
    hb = HeartbeatConfig(interval_s=2.0, timeout_s=10.0)
    node = NodeRecord("n1", NodeConfig(names=("n1",)), ["p"], registered=True, last_heartbeat=100.0)
    assert failures.liveness(node, 115.0, hb, 0.0) is failures.Liveness.DEAD
    # 12 of those 15 s ctld's own loop was stalled: 3 s of silence it could hear
    assert failures.liveness(node, 115.0, hb, 0.0, deaf=12.0) is failures.Liveness.OK
    assert failures.liveness(node, 115.0, hb, 0.0, deaf=8.0) is failures.Liveness.LATE
