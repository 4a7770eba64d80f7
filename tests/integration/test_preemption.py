"""QoS preemption on real daemons: a low job that checkpoints is signalled, given its
grace time, requeued (its run PREEMPTED in sacct -D) and resumes from its checkpoint
once the high job that took its GPUs has run; in mode cancel it ends PREEMPTED."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from corral.testing import LocalCluster, wait_for
from tests.conftest import Commands

QOS = """
[scheduler]
preempt_mode = "requeue"

[[qos]]
name = "low"
grace_time = 6

[[qos]]
name = "scavenger"
preempt_mode = "cancel"

[[qos]]
name = "high"
priority = 100
preempt = ["low", "scavenger"]
"""

# counts to 40, a step every 0.2 s, keeping its count in the checkpoint directory; on
# SIGTERM it takes 2 s (longer than KillWait) to save, then leaves
LOW = """#!/bin/bash
ck=$CORRAL_CHECKPOINT_DIR
n=$(cat "$ck/step" 2>/dev/null || echo 0)
echo "run=$SLURM_RESTART_COUNT start=$n gpus=$CUDA_VISIBLE_DEVICES" >> "$ck/log"
on_term() {
    echo "run=$SLURM_RESTART_COUNT sigterm at=$n" >> "$ck/log"
    sleep 2 & wait $!
    echo "$n" > "$ck/step"
    echo "run=$SLURM_RESTART_COUNT saved at=$n" >> "$ck/log"
    exit 0
}
trap on_term TERM
while [ "$n" -lt 40 ]; do
    sleep 0.2 & wait $!
    n=$((n + 1))
    echo "$n" > "$ck/step"
done
echo "run=$SLURM_RESTART_COUNT done=$n" >> "$ck/log"
"""


@pytest.fixture(scope="module")
def preempting(module_cluster_factory: Any) -> LocalCluster:
    def configure(c: LocalCluster) -> None:
        c.noded_config = f'checkpoint_dir = "{c.state_dir / "checkpoints"}"'
        c.controller_config = "checkpoint_cleanup = false"  # the tests read them after

    cluster: LocalCluster = module_cluster_factory(
        configure, nodes=1, gpus_per_node=4, kill_wait_s=1.0, extra_config=QOS
    )
    return cluster


@pytest.fixture
def cmd(preempting: LocalCluster, tmp_path: pathlib.Path) -> Commands:
    (tmp_path / "low.sh").write_text(LOW)
    return Commands(preempting, tmp_path)


def log_lines(cluster: LocalCluster, job_id: str) -> list[str]:
    path = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id) / "log"
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def steps(cluster: LocalCluster, job_id: str) -> int:
    try:
        return int(
            (
                cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id) / "step"
            ).read_text()
            or 0
        )
    except (OSError, ValueError):
        return 0


def sacct(cmd: Commands, job_id: str, fields: str) -> list[str]:
    out = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", fields).stdout
    return out.splitlines()


def test_low_job_is_requeued_after_its_grace_time_and_resumes(
    preempting: LocalCluster, cmd: Commands
) -> None:
    low = cmd("sbatch", "--parsable", "--qos=low", "--gres=gpu:4", "-t", "10", "low.sh")
    low = low.stdout.strip()
    cmd.wait_state(low, "RUNNING")
    wait_for(lambda: steps(preempting, low) >= 3, 30, "the low job to take a few steps")
    high = cmd(
        "sbatch",
        "--parsable",
        "--qos=high",
        "--gres=gpu:4",
        "-t",
        "5",
        "--wrap",
        "echo high on $CUDA_VISIBLE_DEVICES",
    ).stdout.strip()
    # the notice reaches the job's trap; its grace time lets it finish saving (2 s,
    # longer than KillWait): it is not killed before
    wait_for(lambda: any("saved" in ln for ln in log_lines(preempting, low)), 30, "the save")
    run0 = log_lines(preempting, low)
    assert [ln.split()[1] for ln in run0 if ln.startswith("run=0")][:3] == [
        "start=0",
        "sigterm",
        "saved",
    ]
    saved_at = int(run0[-1].rsplit("=", 1)[1])
    assert saved_at >= 3
    # the high job runs on the freed GPUs, then the low one resumes from its checkpoint
    cmd.wait_state(high, "COMPLETED", timeout=60)
    cmd.wait_state(low, "COMPLETED", timeout=60)
    lines = log_lines(preempting, low)
    run1 = [ln for ln in lines if ln.startswith("run=1")]
    assert run1[0].split()[1] == f"start={saved_at}"
    assert run1[-1] == "run=1 done=40"
    # sacct -D: the preempted run, then the one that completed
    assert sacct(cmd, low, "State,Restarts") == ["PREEMPTED|0", "COMPLETED|1"]
    assert sacct(cmd, high, "State,QOS") == ["COMPLETED|high"]


def test_cancel_mode_ends_the_job_preempted(preempting: LocalCluster, cmd: Commands) -> None:
    low = cmd(
        "sbatch", "--parsable", "--qos=scavenger", "--gres=gpu:2", "-t", "10", "low.sh"
    ).stdout.strip()
    cmd.wait_state(low, "RUNNING")
    high = cmd(
        "sbatch", "--parsable", "--qos=high", "--gres=gpu:4", "-t", "5", "--wrap", "true"
    ).stdout.strip()
    done = cmd.wait_state(low, "PREEMPTED", timeout=30)
    assert done.get("restartCount", 0) == 0
    cmd.wait_state(high, "COMPLETED", timeout=60)
    assert sacct(cmd, low, "State,QOS") == ["PREEMPTED|scavenger"]
