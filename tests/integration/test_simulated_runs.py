"""The node simulator keeps a job's runs apart, as noded does (met by issue 35's bench).

A requeued job's next run is a run of its own: its exit is reported with its run
number (ctld ignores a report of an earlier run), and a node that registers back after
ctld declared it DOWN kills the jobs ctld no longer places there (fencing:
``keep_job_ids``) before it takes new work. A simulator that reported every exit as
run 0 and ignored the fencing left a requeued job RUNNING in ctld forever (its end
ignored as an earlier run's), its earlier copy running on beside it.
"""

from __future__ import annotations

import os
import pathlib
import signal

import pytest

from corral.api import Controller as Client
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def _spec(work: pathlib.Path, runtime: float) -> dict[str, object]:
    return {
        "name": "sim",
        "script": f"#!/bin/sh\n#SIM runtime={runtime}\n",
        "workDir": str(work),
        "stdoutPattern": "/dev/null",
        "requeue": True,
        "timeLimitS": 600,
    }


def _job(client: Client, job_id: int) -> dict[str, object]:
    return dict(client.call("GetJobs", {"filter": {"jobIds": [str(job_id)]}})["jobs"][0])


def _state(client: Client, job_id: int) -> str:
    return str(_job(client, job_id)["state"])


def _cluster(factory: ClusterFactory, **kw: object) -> LocalCluster:
    return factory(
        nodes=2,
        simulated=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=2.0,
        kill_wait_s=1.0,
        **kw,
    )


def test_a_requeued_jobs_next_run_ends_and_is_accounted(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    sim = _cluster(cluster_factory)
    client = sim.client()
    job_id = int(client.call("SubmitJob", {"spec": _spec(tmp_path, 3)})["jobId"])
    wait_for(lambda: _state(client, job_id) == "JOB_STATE_RUNNING", 30, "run 0")
    client.call("UpdateJob", {"jobIds": [str(job_id)], "action": "JOB_UPDATE_REQUEUE"})
    wait_for(lambda: int(_job(client, job_id).get("restartCount", 0)) == 1, 30, "the requeue")
    wait_for(lambda: _state(client, job_id) == "JOB_STATE_COMPLETED", 30, "run 1's end")
    stats = sim.sim("stats")["stats"]
    assert stats["running"] == 0 and stats["gpus_in_use"] == 0, stats
    assert stats["oversubscribed"] == 0, stats["violations"]


def test_nodes_back_from_down_fence_their_requeued_jobs_which_run_again(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    # no hold: every node silent at once (the simulator stopped) is declared DOWN
    c = _cluster(cluster_factory, heartbeat_config="hold_fraction = 0")
    client = c.client()
    ids = [int(client.call("SubmitJob", {"spec": _spec(tmp_path, 600)})["jobId"]) for _ in (1, 2)]
    wait_for(lambda: all(_state(client, i) == "JOB_STATE_RUNNING" for i in ids), 30, "running")

    simulator = c.procs["simnodes"].pid
    os.kill(simulator, signal.SIGSTOP)  # every node silent, its job's run 0 kept
    try:
        wait_for(
            lambda: all(int(_job(client, i).get("restartCount", 0)) == 1 for i in ids),
            30,
            "both jobs requeued off their silent nodes",
        )
    finally:
        os.kill(simulator, signal.SIGCONT)
    # back, each node kills run 0 (ctld keeps nothing there) and so takes run 1
    wait_for(lambda: all(_state(client, i) == "JOB_STATE_RUNNING" for i in ids), 30, "the runs 1")
    stats = c.sim("stats")["stats"]
    assert stats["running"] == 2, stats  # the runs 1 alone: no run 0 left anywhere
    assert stats["oversubscribed"] == 0, stats["violations"]
    client.call("CancelJobs", {"filter": {"jobIds": [str(i) for i in ids]}})
    wait_for(lambda: all(_state(client, i) == "JOB_STATE_CANCELLED" for i in ids), 30, "cancelled")
    assert all(int(_job(client, i).get("restartCount", 0)) == 1 for i in ids)
    assert c.sim("stats")["stats"]["gpus_in_use"] == 0
