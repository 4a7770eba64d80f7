"""Fair-share usage counts every run of a requeued job, as Slurm charges every run:
the run that a requeue ends is charged at once, and a restarted ctld reloads it from the
store (job_runs), on both stores."""

from __future__ import annotations

import asyncio

import pytest

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import (
    ManualClock,
    RecordingDispatcher,
    make_cluster,
    register_all,
    registration,
)
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.model.usage import billing_rate

CONFIG = parse_config(
    {
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True, "max_time": "1:00:00"}],
        "priority": {"decay_half_life": 3600},
    }
)
ALICE = Identity("alice", 1000, 1000)


async def test_a_requeued_run_is_charged_and_reloaded(store_url: str) -> None:
    clock = ManualClock()
    cluster = make_cluster(CONFIG, store_url, clock=clock, dispatcher=RecordingDispatcher())
    reloaded = None
    try:
        await register_all(cluster)
        spec = pb.JobSpec(script="#!/bin/sh\ntrue\n", work_dir="/tmp", name="t", gpus_per_node=2)
        job = await cluster.submit(ALICE, spec)
        await cluster.schedule_pass()
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
        assert job.state == js.RUNNING
        rate = billing_rate(job, CONFIG.priority)
        assert rate > 0
        clock.advance(30)
        await cluster.register_node(registration(cluster, job.batch_host))  # it lost the job
        assert job.state == js.PENDING and job.restart_count == 1
        key = (job.account, "alice")
        charged = cluster.ledger.snapshot(clock(), [])
        assert charged[key] == pytest.approx(30 * rate)
        clock.advance(3600)  # one half-life later, after a restart: half of it
        reloaded = make_cluster(CONFIG, store_url, clock=clock)
        assert reloaded.ledger.snapshot(clock(), [])[key] == pytest.approx(15 * rate)
    finally:
        cluster.store.close()
        if reloaded is not None:
            reloaded.store.close()


async def test_a_qos_usage_factor_scales_the_charge(store_url: str) -> None:
    config = parse_config(
        {
            "nodes": [{"names": "n[1-2]"}],
            "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
            "qos": [{"name": "cheap", "usage_factor": 0.5}, {"name": "dear", "usage_factor": 2}],
        }
    )
    clock = ManualClock()
    cluster = make_cluster(config, store_url, clock=clock, dispatcher=RecordingDispatcher())
    try:
        await register_all(cluster)
        jobs = []
        for qos in ("cheap", "dear", "normal"):
            spec = pb.JobSpec(script="#!/bin/sh\ntrue\n", work_dir="/tmp", qos=qos)
            jobs.append(await cluster.submit(Identity(qos, 2000, 2000), spec))
        await cluster.schedule_pass()
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
        assert all(j.state == js.RUNNING for j in jobs)
        clock.advance(100)
        usage = cluster.ledger.snapshot(clock(), jobs)
        rate = billing_rate(jobs[0], config.priority)
        assert [usage[(j.account, j.user)] for j in jobs] == pytest.approx(
            [50 * rate, 200 * rate, 100 * rate]
        )
    finally:
        cluster.store.close()
