"""scontrol's job-id arguments name an array task as squeue -j does: ``5_1`` is task 1
of array 5 (a job id of its own, looked up), not job 5; a plain array id names each
task not yet ended (ctld expands it). Through the installed command and real daemons."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def one(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Commands:
    c = cluster_factory(nodes=1)
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


def tasks(one: Commands, master: str) -> dict[int, dict[str, Any]]:
    """The array's tasks by index."""
    reply = one.cluster.client().get_jobs({"filter": {"jobIds": [master]}})
    return {int(j.get("arrayTaskId", 0)): dict(j) for j in reply.get("jobs", [])}


def held(job: dict[str, Any]) -> bool:
    return job.get("hold", "HOLD_NONE") != "HOLD_NONE"


def test_array_task_ids_name_the_task_and_an_array_id_names_every_task(one: Commands) -> None:
    # pending for an hour (BeginTime): held, released and updated while never started
    argv = ("sbatch", "--parsable", "--begin=now+1hour", "--array=0-2", "--wrap", "true")
    master = one(*argv).stdout.strip()
    before = tasks(one, master)
    assert sorted(before) == [0, 1, 2] and not any(map(held, before.values())), before
    assert len({str(j["jobId"]) for j in before.values()}) == 3

    one("scontrol", "update", f"JobId={master}_2", "TimeLimit=7")
    one("scontrol", "hold", f"{master}_1")
    after = tasks(one, master)
    assert int(after[2]["timeLimitS"]) == 7 * 60
    assert int(after[0].get("timeLimitS", 0)) != 7 * 60  # not job <master> (task 0)
    assert [held(after[i]) for i in range(3)] == [False, True, False], after

    bad = one("scontrol", "release", f"{master}_99", check=False)
    assert bad.returncode == 1
    assert f"Invalid job id specified for job {master}_99" in bad.stderr, bad.stderr
    one("scontrol", "release", f"{master}_1")
    assert not any(map(held, tasks(one, master).values()))

    one("scontrol", "hold", master)  # the array's id: each task not yet ended
    assert all(map(held, tasks(one, master).values()))
    one("scontrol", "release", master)
    assert not any(map(held, tasks(one, master).values()))
    one("scancel", master)
