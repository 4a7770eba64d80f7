"""Slurm's filename patterns in an array task (man sbatch/srun, "filename pattern"):
%A is the array's master job id, %a the task's index, %j the task's own job id, %J
"jobid.stepid" in a step; sbatch's -o/-i, srun's -o/-e and scontrol's StdIn/StdOut
all expand them from the job's real array ids, through the real daemons."""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Any

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN, Commands, wait_for

pytestmark = pytest.mark.timeout(180)

SCRIPT = """#!/bin/sh
read line
echo "in $line"
echo "job $SLURM_JOB_ID $SLURMD_NODENAME"
mkdir -p "d/${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
srun -o 'd/%A_%a/%j-%J-%s-%t-%n-%N-%x-%u.txt' -e 'd/%A_%a/err-%3a.txt' \\
    sh -c 'echo out; echo err >&2'
"""


@pytest.fixture
def one(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Commands:
    c = cluster_factory(nodes=1, gpus_per_node=2)
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


def task_of(one: Commands, master: str, index: int) -> dict[str, Any]:
    """The array task ``master_index`` once it has ended."""

    def ended() -> dict[str, Any] | None:
        reply = one.cluster.client().get_jobs({"filter": {"arrayTasks": [f"{master}_{index}"]}})
        jobs = [dict(j) for j in reply.get("jobs", [])]
        done = ("JOB_STATE_COMPLETED", "JOB_STATE_FAILED")
        return jobs[0] if jobs and jobs[0].get("state") in done else None

    return wait_for(ended, 60, f"array task {master}_{index} to end")


def test_every_array_task_expands_a_and_A_from_its_array_ids(one: Commands) -> None:
    for a in range(3):
        (one.cwd / f"in-{a}.txt").write_text(f"line{a}\n")
    (one.cwd / "job.sh").write_text(SCRIPT)
    master = one(
        "sbatch",
        "--parsable",
        "-J",
        "arr",
        "--array=0-2",
        "-o",
        "o-%A_%a.txt",
        "-i",
        "in-%a.txt",
        "job.sh",
    ).stdout.strip()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    for a in range(3):
        task = task_of(one, master, a)
        out = (one.cwd / f"o-{master}_{a}.txt").read_text().splitlines()
        assert out[0] == f"in line{a}", out  # -i in-%a.txt: this task's own input
        _, jid, node = out[1].split()
        assert task["state"] == "JOB_STATE_COMPLETED", out
        folder = one.cwd / "d" / f"{master}_{a}"
        step_file = folder / f"{jid}-{jid}.0-0-0-0-{node.split('.')[0]}-arr-{user}.txt"
        assert step_file.read_text() == "out\n", sorted(os.listdir(folder))
        assert (folder / f"err-{a:03d}.txt").read_text() == "err\n"
        shown = one("scontrol", "show", "job", jid).stdout
        assert f"StdIn={one.cwd}/in-{a}.txt" in shown, shown
        assert f"StdOut={one.cwd}/o-{master}_{a}.txt" in shown, shown


def test_scontrol_shows_a_pending_array_tasks_default_output_as_slurm(one: Commands) -> None:
    held = one("sbatch", "--parsable", "-H", "--array=0-1", "--wrap", "true").stdout.strip()
    held_task = one.cluster.client().get_jobs({"filter": {"arrayTasks": [f"{held}_1"]}})
    shown = one("scontrol", "show", "job", str(held_task["jobs"][0]["jobId"])).stdout
    assert f"StdOut={one.cwd}/slurm-{held}_1.out" in shown, shown
    one("scancel", held)


def test_plain_srun_outside_an_array_keeps_A_as_the_job_id(one: Commands) -> None:
    env = {"PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    # SLURM_ARRAY_* of some other job in the caller's environment are not this job's
    env |= {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "5"}
    one("srun", "-J", "plain", "-o", "p-%A_%a-%J.txt", "echo", "hi", env=env)
    (made,) = list(one.cwd.glob("p-*.txt"))
    jid = made.name.split("-")[1].split("_")[0]
    assert made.name == f"p-{jid}_0-{jid}.0.txt"
