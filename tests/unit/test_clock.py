"""The one injected clock (corral/clock.py) that ctld and noded share: tests move time,
nothing waits for it. ctld sleeps on it, noded sets timers on it; ManualClock runs both
in time order."""

from __future__ import annotations

import asyncio
import pathlib
import re
import time

import pytest

from corral.clock import Clock, ManualClock, SystemClock, wait_event
from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js

ALICE = Identity("alice", 1000, 1000)
CONFIG = parse_config(
    {
        "controller": {"sched_interval_s": 60},
        "heartbeat": {"interval_s": 10, "timeout_s": 60},
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
    }
)


async def test_manual_clock_wakes_sleepers_in_order() -> None:
    clock = ManualClock(now=100.0)
    woke: list[str] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(f"{name}@{clock():g}")

    tasks = [asyncio.ensure_future(nap(n, s)) for n, s in (("b", 20), ("a", 10), ("c", 30))]
    await asyncio.sleep(0)
    clock.advance(15)
    await asyncio.sleep(0)
    assert woke == ["a@115"]
    clock.advance(15)
    await asyncio.gather(*tasks)
    assert woke == ["a@115", "b@130", "c@130"]


async def test_manual_clock_runs_timers_and_wakes_sleepers_in_time_order() -> None:
    clock = ManualClock(now=0.0)
    seen: list[str] = []

    async def nap() -> None:
        await clock.sleep(20)
        seen.append(f"sleeper@{clock():g}")  # runs after advance returns: the final time

    napping = asyncio.ensure_future(nap())
    await asyncio.sleep(0)
    clock.call_later(30, lambda: seen.append(f"late@{clock():g}"))
    clock.call_later(10, lambda what: seen.append(f"{what}@{clock():g}"), "early")
    cancelled = clock.call_later(15, lambda: seen.append("cancelled"))
    cancelled.cancel()
    clock.advance(25)
    assert seen == ["early@10"]  # a timer runs at its own time, inside advance
    await napping
    assert seen == ["early@10", "sleeper@25"]
    clock.advance(5)
    assert seen == ["early@10", "sleeper@25", "late@30"] and clock() == 30


def test_a_timer_set_by_a_timer_runs_if_it_falls_due_within_the_advance() -> None:
    clock = ManualClock(now=0.0)
    fired: list[float] = []

    def again() -> None:
        fired.append(clock())
        if len(fired) < 3:
            clock.call_later(4, again)

    clock.call_later(4, again)
    clock.advance(10)
    assert fired == [4, 8] and clock() == 10
    clock.advance(2)
    assert fired == [4, 8, 12]
    clock.call_later(-1, lambda: fired.append(-1))  # overdue: runs at the next advance
    assert fired[-1] == 12
    clock.advance(0)
    assert fired[-1] == -1


async def test_the_system_clock_keeps_the_same_protocol() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock) and isinstance(ManualClock(), Clock)
    assert abs(clock() - time.time()) < 5
    done = asyncio.Event()
    timer = clock.call_later(0.01, done.set)
    never = clock.call_later(0.01, pytest.fail, "a cancelled timer ran")
    never.cancel()
    await asyncio.wait_for(done.wait(), 10)
    timer.cancel()  # after it ran: nothing
    await clock.sleep(0.02)  # past the cancelled one's time


def test_one_clock_module() -> None:
    """noded's timers and ctld's sleeps use corral/clock.py: no second clock protocol."""
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    assert not (src / "noded" / "clock.py").exists()
    defined = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if re.search(r"^class \w*Clock\b", p.read_text(), re.MULTILINE)
    ]
    assert defined == ["corral/clock.py"]


@pytest.fixture
async def env(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    clock = ManualClock()
    cluster = make_cluster(
        CONFIG, f"sqlite:///{tmp_path}/ctld.db", clock=clock, dispatcher=RecordingDispatcher()
    )
    await register_all(cluster)
    yield cluster, clock
    cluster.store.close()


async def test_heartbeat_monitor_marks_a_silent_node_not_responding(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    began = time.monotonic()
    monitor = asyncio.ensure_future(cluster.run_heartbeat_monitor())
    try:
        for _ in range(7):  # 70 s of cluster time: n1 heartbeats every 10 s, n2 is silent
            await clock.run_for(10, step=10)
            assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
            if not cluster.nodes["n2"].responding:
                break
        assert not cluster.nodes["n2"].responding
        assert cluster.nodes["n2"].state == pb.NODE_STATE_DOWN
        assert cluster.nodes["n1"].responding
        assert clock() - cluster.nodes["n2"].last_heartbeat > 60
    finally:
        monitor.cancel()
    assert time.monotonic() - began < 5  # 70 s of heartbeat time, no real waiting


async def test_one_heartbeat_check_is_a_step_a_test_can_take(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    for _ in range(3):  # n1 heartbeats every 10 s; n2 is silent alone
        clock.advance(10)
        assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
        await cluster.check_heartbeats()
    clock.advance(29)
    assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    await cluster.check_heartbeats()
    assert all(n.responding for n in cluster.nodes.values())
    clock.advance(2)
    assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    await cluster.check_heartbeats()
    assert cluster.nodes["n1"].responding
    assert not cluster.nodes["n2"].responding


async def test_allocation_time_limit_on_the_manual_clock(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    job = await cluster.submit(
        ALICE,
        pb.JobSpec(work_dir="/tmp", name="alloc", allocation_only=True, time_limit_s=120),
    )
    await cluster.schedule_pass()
    assert job.state == js.RUNNING
    monitor = asyncio.ensure_future(cluster.run_heartbeat_monitor())
    try:
        for _ in range(10):  # its nodes keep answering (a silent one would go DOWN)
            await clock.run_for(10, step=10)
            for name in cluster.nodes:
                cluster.heartbeat(pb.HeartbeatRequest(name=name))
        assert job.state == js.RUNNING
        await clock.run_for(30, step=10)
        assert job.state == js.TIMEOUT
    finally:
        monitor.cancel()


async def until_idle(clock: ManualClock) -> None:
    """Until the scheduler loop sleeps on its interval (a pass's store commit runs on
    the store's own thread, in real time: poll for it, with a deadline)."""
    deadline = time.monotonic() + 10
    while not any(d - clock() > 1 for d, _, f in clock._sleepers if not f.done()):
        assert time.monotonic() < deadline, "the scheduler loop never went idle"
        clock.advance(0.005)  # past the gap between passes
        await asyncio.sleep(0.01)


async def test_the_scheduler_loop_runs_on_wake_ups_and_on_its_interval(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    loop = asyncio.ensure_future(cluster.run_scheduler())
    try:
        await until_idle(clock)
        passes = cluster.passes
        assert passes >= 1  # load() asked for one
        await clock.run_for(30, step=10)
        assert cluster.passes == passes  # nothing happened, no interval yet
        job = await cluster.submit(ALICE, pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp"))
        assert job.state == js.RUNNING  # started at submit (start_on_submit): no pass
        await until_idle(clock)
        assert cluster.passes == passes
        # (an end, with nothing waiting, is checked by a short pass: none woken either)
        cancel = pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id]))
        await cluster.cancel(ALICE, cancel)
        held = await cluster.submit(
            ALICE, pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", hold=True)
        )
        release = pb.UpdateJobRequest(job_ids=[held.job_id], action=pb.JOB_UPDATE_RELEASE)
        await cluster.update_hold(ALICE, release)
        deadline = time.monotonic() + 10
        while cluster.passes == passes:  # the release's wake-up: no clock time needed
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await until_idle(clock)
        assert cluster.passes == passes + 1
        await clock.run_for(61, step=1)
        assert cluster.passes == passes + 2  # the periodic pass (the next is 60 s on)
    finally:
        loop.cancel()


async def test_wait_event_ends_at_the_event_or_at_the_clocks_time() -> None:
    clock = ManualClock(now=0.0)
    event = asyncio.Event()
    waiting = asyncio.ensure_future(wait_event(clock, event, 10))
    await asyncio.sleep(0)
    event.set()
    assert await asyncio.wait_for(waiting, 10) is True  # the event, the clock unmoved
    event.clear()
    waiting = asyncio.ensure_future(wait_event(clock, event, 10))
    for _ in range(10):  # until it sleeps on the clock
        await asyncio.sleep(0)
    assert clock.sleepers == 1
    clock.advance(9.5)
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.advance(0.5)
    assert await asyncio.wait_for(waiting, 10) is False  # its time passed on the clock
    assert clock.sleepers == 0 and clock.monotonic() == clock() == 10.0
