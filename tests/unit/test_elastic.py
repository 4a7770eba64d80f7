"""Elastic jobs on virtual time (docs/reliability.md): -N MIN-MAX --elastic starts as
large as fits, and a node failure requeues it at once at a smaller size on the nodes
it kept (its batch host first), telling the next run the earlier size."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import JobRequest, PartitionView, Settings, Snapshot, schedule
from noded.env import batch_environment
from tests.unit.test_backfill import node

ALICE = Identity("alice", 1000, 1000)


def config(nodes: int = 3, **partition: Any) -> Any:
    return parse_config(
        {
            "heartbeat": {"interval_s": 1.0, "timeout_s": 10.0},
            "nodes": [{"names": f"n[1-{nodes}]", "cpus": 8}],
            "partitions": [{"name": "p", "nodes": f"n[1-{nodes}]", "default": True, **partition}],
        }
    )


def spec(**kw: Any) -> pb.JobSpec:
    base: dict[str, Any] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)


async def make(tmp_path: pathlib.Path, **partition: Any) -> tuple[Cluster, ManualClock, Any]:
    clock, disp = ManualClock(), RecordingDispatcher()
    cluster = make_cluster(
        config(**partition), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=disp
    )
    await register_all(cluster)
    return cluster, clock, disp


async def settle(cluster: Cluster) -> None:
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def silence(cluster: Cluster, clock: ManualClock, dead: str, seconds: float) -> None:
    for _ in range(int(seconds * 2)):
        clock.advance(0.5)
        for name in cluster.nodes:
            if name != dead:
                cluster.heartbeat(pb.HeartbeatRequest(name=name))
        await cluster.check_heartbeats()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


def elastic(**kw: Any) -> pb.JobSpec:
    return spec(nodes_min=2, nodes_max=3, requeue=True, elastic=True, **kw)


async def test_elastic_job_starts_at_its_maximum_when_free(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, elastic(cpus_per_task=8))
    plain = await cluster.submit(ALICE, spec(nodes_min=2, nodes_max=3, cpus_per_task=8))
    await settle(cluster)
    assert job.state == js.RUNNING and len(job.allocations) == 3 and job.num_tasks == 3
    assert plain.state == js.PENDING  # no room left for even its minimum


async def test_elastic_job_takes_what_is_free_between_min_and_max(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, _ = await make(tmp_path)
    one = await cluster.submit(ALICE, spec(nodelist="n2", cpus_per_task=8))
    await settle(cluster)
    job = await cluster.submit(ALICE, elastic(cpus_per_task=8))
    await settle(cluster)
    assert one.state == js.RUNNING
    assert job.state == js.RUNNING and sorted(a.node for a in job.allocations) == ["n1", "n3"]


async def test_node_failure_shrinks_onto_the_healthy_nodes_batch_host_first(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, disp = await make(tmp_path)
    job = await cluster.submit(ALICE, elastic(ntasks_per_node=2))
    await settle(cluster)
    assert [a.node for a in job.allocations] == ["n1", "n2", "n3"] and job.batch_host == "n1"
    await silence(cluster, clock, "n2", 11)
    assert cluster.nodes["n2"].down and job.state == js.PENDING
    assert list(job.previous_nodes) == ["n1", "n3"] and job.previous_num_nodes == 3
    assert job.previous_num_tasks == 6
    await settle(cluster)  # at once: no wait for a third node
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n3"]
    assert job.batch_host == "n1" and job.num_tasks == 4
    launched = [r for _, r in disp.launched if r.job.job_id == job.job_id][-1].job
    env = batch_environment(launched, "n1", "c")
    assert env["SLURM_NNODES"] == "2" and env["SLURM_JOB_NODELIST"] == "n[1,3]"
    assert env["SLURM_NTASKS"] == "4" and env["SLURM_RESTART_COUNT"] == "1"
    assert env["SLURM_JOB_PREVIOUS_NUM_NODES"] == "3"
    assert env["SLURM_JOB_PREVIOUS_NTASKS"] == "6"


async def test_a_requeued_elastic_job_survives_a_ctld_restart(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, elastic())
    await settle(cluster)
    await silence(cluster, clock, "n3", 11)
    assert job.state == js.PENDING
    cluster.store.close()
    again = make_cluster(
        config(), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=RecordingDispatcher()
    )
    back = again.state.jobs[job.job_id]
    assert back.spec.elastic and list(back.previous_nodes) == ["n1", "n2"]
    again.store.close()


@pytest.mark.parametrize("policy", ["firstfit", "pack", "frag", "fgd", "random"])
def test_the_core_prefers_the_earlier_nodes_batch_host_first(policy: str) -> None:
    nodes = tuple(node(f"n{i}") for i in range(1, 6))
    req = JobRequest(
        7, ("p",), nodes_min=2, nodes_max=3, elastic=True, prefer=("n4", "n2"), time_limit_s=60
    )
    snap = Snapshot(
        version=1,
        now=0.0,
        nodes=nodes,
        partitions=(PartitionView("p", tuple(n.name for n in nodes)),),
        pending=(req,),
        settings=Settings(placement=policy),
    )
    (start,) = schedule(snap).starts
    names = [p.node for p in start.placements]
    assert len(names) == 3 and names[:2] == ["n4", "n2"]


async def test_a_range_without_elastic_still_runs_at_its_minimum(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    plain = await cluster.submit(ALICE, spec(nodes_min=2, nodes_max=3, cpus_per_task=8))
    await settle(cluster)
    assert plain.state == js.RUNNING and len(plain.allocations) == 2


async def test_a_partitions_elastic_default_makes_a_range_elastic(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path, elastic=True)
    ranged = await cluster.submit(ALICE, spec(nodes_min=2, nodes_max=3))
    fixed = await cluster.submit(ALICE, spec(nodes_min=2))
    assert ranged.spec.elastic and not fixed.spec.elastic
