"""The plan applier refuses a plan the state has moved past, and never oversubscribes."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

import pytest

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import schedule

ALICE = Identity("alice", 1000, 1000)
CONFIG = parse_config(
    {
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
    }
)


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
async def cluster(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    c = make_cluster(
        CONFIG,
        f"sqlite:///{tmp_path}/ctld.db",
        clock=ManualClock(),
        dispatcher=RecordingDispatcher(),
    )
    await register_all(c, cpus=4, gpus=2)
    yield c
    while c._tasks:
        await asyncio.gather(*list(c._tasks))
    c.store.close()


def assert_not_oversubscribed(c: Cluster) -> None:
    for node in c.nodes.values():
        assert node.alloc_cpus <= node.resources.cpus
        assert node.alloc_mem_mb <= node.resources.memory_mb
    seen: dict[tuple[str, int], int] = {}
    for job in c.jobs.values():
        if job.state in js.ON_NODE:
            for alloc in job.allocations:
                for gpu in alloc.gpu_indices:
                    assert (alloc.node, gpu) not in seen, f"GPU {alloc.node}:{gpu} given twice"
                    seen[(alloc.node, gpu)] = job.job_id


async def test_a_plan_made_before_a_submit_is_refused(cluster: Cluster) -> None:
    waiting = await cluster.submit(ALICE, spec(gpus_per_node=2))
    plan = schedule(cluster.snapshot())
    assert [s.job_id for s in plan.starts] == [waiting.job_id]
    await cluster.submit(ALICE, spec(gpus_per_node=2))  # the state moves on
    assert not await cluster.apply_plan(plan, pass_no=1)
    assert waiting.state == js.PENDING and not waiting.allocations
    assert all(not n.alloc_gpus for n in cluster.nodes.values())
    await cluster.schedule_pass()  # a fresh pass starts both, one per node
    assert {j.state for j in cluster.jobs.values()} == {js.RUNNING}
    assert_not_oversubscribed(cluster)


async def test_a_plan_made_before_a_cancel_or_a_drain_is_refused(cluster: Cluster) -> None:
    job = await cluster.submit(ALICE, spec(gpus_per_node=1))
    plan = schedule(cluster.snapshot())
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))
    assert not await cluster.apply_plan(plan, pass_no=1)
    assert job.state == js.CANCELLED and not job.allocations

    other = await cluster.submit(ALICE, spec(gpus_per_node=1, nodelist="n1"))
    plan = schedule(cluster.snapshot())
    root = Identity("root", 0, 0)
    await cluster.update_node(root, pb.UpdateNodeRequest(names=["n1"], state="DRAIN", reason="x"))
    assert not await cluster.apply_plan(plan, pass_no=2)
    assert other.state == js.PENDING and not cluster.nodes["n1"].alloc_gpus


async def test_each_start_is_checked_even_when_the_version_matches(cluster: Cluster) -> None:
    first = await cluster.submit(ALICE, spec(gpus_per_node=2, nodelist="n1"))
    second = await cluster.submit(ALICE, spec(gpus_per_node=2, nodelist="n1"))
    old = schedule(cluster.snapshot())
    assert [s.job_id for s in old.starts] == [first.job_id]
    await cluster.schedule_pass()  # starts ``first`` on n1's two GPUs
    assert first.state == js.RUNNING
    # the same placement handed to ``second``, dressed up as current
    forged = dataclasses.replace(old.starts[0], job_id=second.job_id)
    plan = dataclasses.replace(old, snapshot_version=cluster.version, starts=(forged,))
    assert await cluster.apply_plan(plan, pass_no=9)
    assert second.state == js.PENDING and not second.allocations
    assert_not_oversubscribed(cluster)
    # a start for a job no longer pending is dropped too
    again = dataclasses.replace(old, snapshot_version=cluster.version)
    await cluster.apply_plan(again, pass_no=10)
    assert [e.event for e in first.events].count("started") == 1
    assert_not_oversubscribed(cluster)


async def test_ctld_hands_the_core_the_starvation_guard_and_eligible_times(
    cluster: Cluster,
) -> None:
    # the default guard reaches the core, and a --begin job's wait counts from its begin
    snap = cluster.snapshot()
    assert snap.settings.starve_after_s == 24 * 3600
    now = cluster.clock()
    later = await cluster.submit(ALICE, spec(gpus_per_node=2, begin_time=now + 600))
    plain = await cluster.submit(ALICE, spec(gpus_per_node=2))
    cluster.clock.advance(700)  # type: ignore[attr-defined]
    reqs = {r.job_id: r for r in cluster.snapshot().pending}
    assert reqs[later.job_id].eligible_time == pytest.approx(now + 600)
    assert reqs[plain.job_id].eligible_time == pytest.approx(reqs[plain.job_id].submit_time)
