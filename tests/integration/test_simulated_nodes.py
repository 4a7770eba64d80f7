"""ctld with many nodes, played by the node simulator (corral.localcluster.simnodes).

ctld is the real daemon; one simulator process registers, heartbeats, takes launches
and reports exits for every node over the real gRPC protocol. The simulator checks
each launch against what its node has, so oversubscription would be seen on the node.
"""

from __future__ import annotations

import pathlib
import random

import pytest

from corral.api import Controller as Client
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

ACTIVE = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_COMPLETING"]


@pytest.fixture
def big(cluster_factory: ClusterFactory) -> LocalCluster:
    return cluster_factory(
        start_timeout=120,
        nodes=200,
        simulated=True,
        heartbeat_interval_s=5.0,
        heartbeat_timeout_s=60.0,
    )


@pytest.fixture
def small(cluster_factory: ClusterFactory) -> LocalCluster:
    return cluster_factory(
        start_timeout=120,
        nodes=4,
        simulated=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=2.0,
        kill_wait_s=1.0,
    )


def _spec(work: pathlib.Path, script: str, **kw: object) -> dict[str, object]:
    return {
        "name": "sim",
        "script": f"#!/bin/sh\n{script}\n",
        "workDir": str(work),
        "stdoutPattern": "/dev/null",
        **kw,
    }


def _submit(client: Client, spec: dict[str, object]) -> int:
    return int(client.call("SubmitJob", {"spec": spec})["jobId"])


def _jobs(client: Client, ids: list[int]) -> dict[int, dict[str, object]]:
    reply = client.call("GetJobs", {"filter": {"jobIds": [str(i) for i in ids]}})
    return {int(j["jobId"]): j for j in reply.get("jobs", [])}


@pytest.mark.timeout(300)
def test_200_nodes_mixed_gpu_load_completes_without_oversubscription(
    big: LocalCluster, tmp_path: pathlib.Path
) -> None:
    client = big.client()
    nodes = client.call("GetNodes", {})["nodes"]
    assert len(nodes) == 200 and all(n["state"] == "NODE_STATE_IDLE" for n in nodes)
    rng = random.Random(16)
    work = tmp_path / "work"
    work.mkdir()
    expected: dict[int, str] = {}
    # 1,600 GPUs, ~2,900 GPUs of demand released at once: jobs queue, pack and backfill
    for i in range(700):
        shape = rng.choice(["gpu1", "gpu2", "gpu4", "gpu8", "two_nodes", "cpu"])
        runtime = round(rng.uniform(0.5, 3.0), 2)
        fails = i % 50 == 7
        script = f"#SIM runtime={runtime} exit={3 if fails else 0}"
        kw: dict[str, object] = {"timeLimitS": 600, "hold": True}
        if shape.startswith("gpu"):
            kw["gpusPerNode"] = int(shape[3:])
            kw["cpusPerTask"] = 2
        elif shape == "two_nodes":
            kw.update(nodesMin=2, nodesMax=2, gpusPerNode=8, exclusive=True)
        else:
            kw["cpusPerTask"] = rng.choice([1, 4, 8])
        job_id = _submit(client, _spec(work, script, **kw))
        expected[job_id] = "JOB_STATE_FAILED" if fails else "JOB_STATE_COMPLETED"

    client.call("UpdateJob", {"jobIds": [str(i) for i in expected], "action": "JOB_UPDATE_RELEASE"})

    def all_done() -> bool:
        reply = client.call("GetJobs", {"filter": {"states": ACTIVE}})
        return not reply.get("jobs")

    wait_for(all_done, 240, "every job to end")
    stats = big.sim("stats")["stats"]
    assert stats["oversubscribed"] == 0, stats["violations"]
    assert stats["launched"] == len(expected) == stats["finished"]
    assert stats["peak_gpus_in_use"] > 800  # the cluster was packed, not trickled
    assert stats["gpus_in_use"] == 0
    ended = _jobs(client, list(expected))
    assert {i: j["state"] for i, j in ended.items()} == expected
    # what the nodes reported reached accounting
    one = next(j for j in ended.values() if j["state"] == "JOB_STATE_COMPLETED")
    assert int(one["usage"]["maxRssKb"]) > 0
    nodes = client.call("GetNodes", {})["nodes"]
    assert all(n["state"] == "NODE_STATE_IDLE" for n in nodes)


@pytest.mark.timeout(120)
def test_time_limit_scancel_fault_and_crash(small: LocalCluster, tmp_path: pathlib.Path) -> None:
    client = small.client()
    work = tmp_path / "work"
    work.mkdir()
    # runs past its limit: ends TIMEOUT at the limit
    late = _submit(client, _spec(work, "sleep 30", timeLimitS=1))
    # cancelled while it runs
    long = _submit(client, _spec(work, "#SIM runtime=300", timeLimitS=600))
    wait_for(lambda: _jobs(client, [long])[long]["state"] == "JOB_STATE_RUNNING", 30, "running")
    client.call("CancelJobs", {"filter": {"jobIds": [str(long)]}})
    wait_for(
        lambda: _jobs(client, [late, long])[late]["state"] == "JOB_STATE_TIMEOUT", 30, "timeout"
    )
    wait_for(lambda: _jobs(client, [long])[long]["state"] == "JOB_STATE_CANCELLED", 30, "cancelled")

    def node(name: str) -> dict[str, object]:
        return dict(client.call("GetNodes", {"names": [name]})["nodes"][0])

    # a GPU fault on the next heartbeat drains the node
    small.sim("fault", "node02", reason="GPU 3 XID 79")
    wait_for(lambda: node("node02")["state"] == "NODE_STATE_DRAIN", 30, "node02 drained")
    assert node("node02")["reason"].startswith("GPU 3 XID 79")  # type: ignore[attr-defined]
    # a crashed node stops answering: ctld marks it DOWN; revived, it registers again
    small.sim("crash", "node03")
    wait_for(lambda: node("node03")["state"] == "NODE_STATE_DOWN", 30, "node03 down")
    small.sim("revive", "node03")
    wait_for(lambda: node("node03")["state"] == "NODE_STATE_IDLE", 30, "node03 back")
    assert small.sim("stats")["stats"]["oversubscribed"] == 0


@pytest.fixture
def hundred(cluster_factory: ClusterFactory) -> LocalCluster:
    # heartbeats every 2 s (50/s for the lot); a node silent for 20 s is down (a margin
    # for a loaded machine: no live node may be taken for a dead one)
    return cluster_factory(
        start_timeout=120,
        nodes=100,
        simulated=True,
        heartbeat_interval_s=2.0,
        heartbeat_timeout_s=20.0,
        kill_wait_s=1.0,
    )


@pytest.mark.timeout(300)
def test_100_nodes_placement_commands_and_a_failed_node_requeues_its_job(
    hundred: LocalCluster, tmp_path: pathlib.Path
) -> None:
    client = hundred.client()
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(hundred, work)
    # one whole node each, released at once: a pass places 100 jobs on 100 nodes
    ids = [
        _submit(
            client,
            _spec(work, "#SIM runtime=600", exclusive=True, timeLimitS=900, hold=True),
        )
        for _ in range(100)
    ]
    client.call("UpdateJob", {"jobIds": [str(i) for i in ids], "action": "JOB_UPDATE_RELEASE"})
    wait_for(
        lambda: all(j["state"] == "JOB_STATE_RUNNING" for j in _jobs(client, ids).values()),
        120,
        "every job to run",
    )
    hosts = {i: str(j["batchHost"]) for i, j in _jobs(client, ids).items()}
    assert sorted(hosts.values()) == hundred.node_names  # one job per node, every node
    assert hundred.sim("stats")["stats"]["oversubscribed"] == 0

    # the commands see the same picture across the hundred nodes
    lines = cmd("squeue", "-h", "-t", "R", "-o", "%i %N").stdout.split("\n")
    assert {int(a): b for a, b in (line.split() for line in lines if line)} == hosts
    assert cmd("sinfo", "-h", "-o", "%D %T").stdout.split() == ["100", "allocated"]

    # a node fails: ctld finds it silent, marks it down and requeues its job
    victim = ids[41]
    dead = hosts[victim]
    hundred.sim("crash", dead)

    def node(name: str) -> dict[str, object]:
        return dict(client.call("GetNodes", {"names": [name]})["nodes"][0])

    wait_for(lambda: node(dead)["state"] == "NODE_STATE_DOWN", 60, f"{dead} down")
    wait_for(
        lambda: _jobs(client, [victim])[victim]["state"] == "JOB_STATE_PENDING",
        60,
        "the job requeued",
    )
    states = sorted(cmd("sinfo", "-h", "-o", "%D %T").stdout.split("\n"))
    # "*": not responding, as Slurm marks it
    assert [s for s in states if s] == ["1 down*", "99 allocated"]
    # every other node is busy: the requeued job starts where a cancelled job was
    freed = ids[7]
    cmd("scancel", str(freed))
    wait_for(
        lambda: _jobs(client, [victim])[victim]["state"] == "JOB_STATE_RUNNING",
        60,
        "the requeued job to run again",
    )
    again = _jobs(client, [victim])[victim]
    assert again["batchHost"] == hosts[freed] != dead
    assert int(again.get("restartCount", 0)) == 1
    assert _jobs(client, [freed])[freed]["state"] == "JOB_STATE_CANCELLED"
    # the node comes back: it registers again and is idle
    hundred.sim("revive", dead)
    wait_for(lambda: node(dead)["state"] == "NODE_STATE_IDLE", 60, f"{dead} back")
    assert hundred.sim("stats")["stats"]["oversubscribed"] == 0
