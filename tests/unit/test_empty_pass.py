"""A pass with nothing pending builds no snapshot of the nodes (issue 29): the core would
plan nothing, and at 12,500 nodes the snapshot was most of a pass woken by every
registration and heartbeat flip. What the pass leaves (the base a start at submit is
decided against) is as after a pass that built one."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import INFINITY, Snapshot
from tests.unit.test_start_on_submit import close, config, new_cluster, spec

ALICE = Identity("alice", 1000, 1000)


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[Cluster]:
    c = await new_cluster(tmp_path / "ctld.db", config(nodes=4))
    yield c
    await close(c)


def counting(c: Cluster) -> list[Snapshot]:
    built: list[Snapshot] = []

    def snapshot() -> Snapshot:
        built.append(c.snapshots.build())
        return built[-1]

    c.scheduler.snapshot = snapshot
    return built


async def test_an_empty_queue_builds_no_snapshot(cluster: Cluster) -> None:
    built = counting(cluster)
    passes = cluster.passes
    await cluster.schedule_pass()
    assert cluster.passes == passes + 1 and built == []
    assert cluster.snapshots.next_eligible == INFINITY
    # the empty pass left the base a start at submit needs
    job = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert job.state == js.RUNNING and job.events[-1].cause == "sched:submit"
    assert built == []


async def test_a_pending_job_is_planned_as_before(cluster: Cluster) -> None:
    built = counting(cluster)
    held = await cluster.submit(ALICE, spec(gpus_per_node=1, hold=True))
    await cluster.schedule_pass()
    assert len(built) == 1 and held.reason == "JobHeldUser"
    # a --begin in the future: the pass sees it and the start at submit waits for it
    begin = cluster.state.clock() + 3600
    later = await cluster.submit(ALICE, spec(gpus_per_node=1, begin_time=begin))
    await cluster.schedule_pass()
    assert len(built) == 2 and later.state == js.PENDING
    assert cluster.snapshots.next_eligible < INFINITY
    await cluster.update_hold(
        ALICE, pb.UpdateJobRequest(job_ids=[held.job_id], action=pb.JOB_UPDATE_RELEASE)
    )
    await cluster.schedule_pass()
    assert held.state == js.RUNNING and len(built) == 3
