"""A deep queue's priority recalculation is spread over passes, a slice per pass."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.planning import scheduling

ALICE = Identity("alice", 1000, 1000)
CONFIG = parse_config(
    {
        "nodes": [{"names": "n1"}],
        "partitions": [{"name": "gpu", "nodes": "n1", "default": True}],
    }
)


@pytest.mark.timeout(60)
async def test_recalculation_walks_the_queue_a_slice_per_pass(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduling, "RECALC_SLICE", 2)
    clock = ManualClock()
    c = make_cluster(CONFIG, f"sqlite:///{tmp_path}/ctld.db", clock=clock)
    try:
        await register_all(c, cpus=4, gpus=2)
        spec = pb.JobSpec(script="#!/bin/sh\ntrue\n", work_dir="/tmp", gpus_per_node=2)
        first = await c.submit(ALICE, spec)  # runs, so the others wait
        waiting = [(await c.submit(ALICE, spec)).job_id for _ in range(5)]
        for _ in range(3):  # the first recalculation: six jobs, two a pass
            await c.schedule_pass()
        assert c.jobs[first.job_id].state == pb.JOB_STATE_RUNNING
        before = {i: c.jobs[i].priority for i in waiting}
        clock.advance(3 * 86400.0)  # ages move: every waiting job's priority rises

        def moved() -> int:
            return sum(1 for i in waiting if c.jobs[i].priority != before[i])

        await c.schedule_pass()
        assert moved() == 2  # one slice, in queue order
        assert [c.jobs[i].priority != before[i] for i in waiting[:2]] == [True, True]
        assert c.state.versions.wake_event.is_set()  # the rest is asked for at once
        await c.schedule_pass()
        assert moved() == 4
        await c.schedule_pass()
        assert moved() == 5
        await c.schedule_pass()  # nothing more is due until the next period
        assert moved() == 5
    finally:
        while c._tasks:
            await asyncio.gather(*list(c._tasks))
        c.store.close()
