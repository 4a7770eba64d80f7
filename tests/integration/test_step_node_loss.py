"""A node's noded dies under a multi-node step: a node failure, not the job's (issue 22).

The commonest training job: ``sbatch -N2 --requeue`` (or -N3) whose script runs
``srun`` with one rank on every node; rank 0 checkpoints. The noded of a node that is
not the batch host dies (alone: its rank runs on until the fence guard kills it; with
its tasks; or killed and started again 3 s later). srun loses that node's stream and
kills the other ranks, so the script exits non-zero: that exit must not be the job's
outcome. The job is requeued (its run recorded NODE_FAIL, the node named), runs again
on healthy nodes from its checkpoint, and no rank of the old run is alive once the
new run starts; without --requeue it ends NODE_FAIL.

examples/train-checkpoint.py logs ``run= host= step= rank= time=`` to steps.log in the
checkpoint directory at every step: the log shows where each run resumed and that no
copy wrote once a later run had begun.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

import pytest

from corral import hostlist
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

pytestmark = pytest.mark.timeout(300)

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train-checkpoint.py"
INTERVAL_S, TIMEOUT_S = 1.0, 5.0


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Any:
    def make(**kw: Any) -> tuple[LocalCluster, Commands]:
        state = cluster_factory.base / f"cluster{len(cluster_factory.started)}"
        kw.setdefault("nodes", 3)
        kw.setdefault("gpus_per_node", 0)
        kw.setdefault("heartbeat_interval_s", INTERVAL_S)
        kw.setdefault("heartbeat_timeout_s", TIMEOUT_S)
        c = cluster_factory(
            noded_config=f'checkpoint_dir = "{state / "checkpoints"}"',
            controller_config="checkpoint_cleanup = false",  # the tests read them after
            **kw,
        )
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return c, Commands(c, work)

    return make


def submit(cmd: Commands, nodes: int, *args: str, steps: int = 40, step_time: float = 0.25) -> str:
    return cmd(
        "sbatch",
        "--parsable",
        f"-N{nodes}",
        "--ntasks-per-node=1",
        "-o",
        "train-%j.out",
        *args,
        "--wrap",
        # each rank logs to a file of its own: a rank whose noded died runs on (it would
        # die of a broken pipe writing to noded's) until the fence guard kills it
        f"srun sh -c 'exec python3 {TRAIN} --steps {steps} --step-time {step_time} "
        ">>rank-$SLURM_PROCID.log 2>&1'",
    ).stdout.strip()


def steps_log(cluster: LocalCluster, job_id: str) -> list[dict[str, str]]:
    path = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id) / "steps.log"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [dict(part.split("=", 1) for part in line.split()) for line in lines if line]


def taken(cluster: LocalCluster, job_id: str, run: str, rank: str | None = None) -> int:
    return sum(
        1
        for e in steps_log(cluster, job_id)
        if e["run"] == run and (rank is None or e["rank"] == rank)
    )


def run_pids(cluster: LocalCluster, job_id: str, run: int) -> set[int]:
    """Every process of run ``run`` of this cluster's job on any node (batch script,
    srun, ranks), whichever noded started it: the job's checkpoint directory (under
    this cluster's state directory: other clusters on the machine have jobs of the same
    id) and that run's SLURM_RESTART_COUNT in its environment."""
    path = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    ckpt = f"CORRAL_CHECKPOINT_DIR={path}".encode()
    count = f"SLURM_RESTART_COUNT={run}".encode()
    found = set()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if ckpt in env and count in env and _alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def describe(pids: set[int]) -> list[str]:
    out = []
    for pid in sorted(pids):
        try:
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        keep = [v for v in env if v.startswith((b"CORRAL_JOB_MARKER", b"SLURMD_NODENAME"))]
        out.append(f"{pid}: {cmd.decode(errors='replace')[:120]} {keep}")
    return out


def _alive(pid: int) -> bool:
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"  # a zombie runs nothing


def rank_pid(cluster: LocalCluster, job_id: str, rank: int) -> int:
    want = f"SLURM_PROCID={rank}".encode()
    for pid in run_pids(cluster, job_id, 0):
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env and b"SLURM_STEP_ID=0" in env:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"train-checkpoint" in cmdline:
                return pid
    raise AssertionError(f"no task of rank {rank} of job {job_id}")


def start_training(cmd: Commands, cluster: LocalCluster, nodes: int, *args: str) -> tuple[str, str]:
    """The job running, every rank a few steps in; (its id, the node that is not the
    batch host and runs the last rank)."""
    job_id = submit(cmd, nodes, *args)
    job = cmd.wait_state(job_id, "RUNNING")
    wait_for(
        lambda: all(taken(cluster, job_id, "0", str(r)) >= 3 for r in range(nodes)),
        60,
        "every rank to take 3 steps",
    )
    victim = next(e["host"] for e in steps_log(cluster, job_id) if e["rank"] == str(nodes - 1))
    assert victim != job["batchHost"]
    return job_id, victim


def assert_requeued_and_ran_once(
    cluster: LocalCluster, cmd: Commands, job_id: str, victim: str, why: str
) -> dict[str, Any]:
    """Requeued once, for the node's failure; no rank of the first run alive once the
    second run started; resumed from the checkpoint; completed."""

    def started_again() -> bool:
        job = cmd.job(job_id)
        return job.get("restartCount") == 1 and job["state"] != "JOB_STATE_PENDING"

    wait_for(started_again, 90, "the requeued run to start")
    # the first run's parts on healthy nodes were told to die with the requeue (srun kept
    # them running while it waited for the lost node: issue 35): gone at once, and before
    # the second run's first step (a node runs a job's next run only once its last is
    # gone, and the next run's batch host is the old one while it is healthy)
    try:
        wait_for(lambda: not run_pids(cluster, job_id, 0), 5, "the first run's processes gone")
    except AssertionError:
        left = run_pids(cluster, job_id, 0)
        raise AssertionError(f"the first run outlived the requeue: {describe(left)}") from None
    wait_for(lambda: taken(cluster, job_id, "1") >= 1, 60, "the requeued run's first step")
    assert not run_pids(cluster, job_id, 0)
    job = cmd.job(job_id)
    assert job["restartCount"] == 1
    requeued = [e for e in job["events"] if e["event"] == "requeued"]
    assert len(requeued) == 1 and victim in requeued[0]["detail"], requeued
    assert why in requeued[0]["detail"], requeued
    done = cmd.wait_state(job_id, "COMPLETED", timeout=120)
    assert done["restartCount"] == 1
    acct = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State,Reason").stdout
    runs = acct.splitlines()
    assert len(runs) == 2 and runs[0].startswith("NODE_FAIL|"), runs
    assert victim in runs[0] and runs[1].startswith("COMPLETED|"), runs
    log = steps_log(cluster, job_id)
    first = next(i for i, e in enumerate(log) if e["run"] == "1")
    assert not [e for e in log[first:] if e["run"] == "0"], "the old run wrote after the new began"
    old = [int(e["step"]) for e in log[:first] if e["rank"] == "0"]
    new = [int(e["step"]) for e in log if (e["run"], e["rank"]) == ("1", "0")]
    assert new[0] in (old[-1], old[-1] + 1) and new[-1] == 40, (old[-3:], new[:3])
    out = (cmd.cwd / f"train-{job_id}.out").read_text()
    # srun says it once ctld declares the node DOWN (as Slurm's srun hears it from
    # slurmctld), unless the job's kill for that node failure came first: slurmstepd's
    # line says it then
    said = f"srun: error: Node failure on {victim}" in out or "DUE TO NODE FAILURE" in out
    assert said, out
    return done


@pytest.mark.parametrize("with_tasks", [False, True], ids=["noded-alone", "with-its-tasks"])
def test_a_non_batch_nodes_noded_dies_under_a_2_node_step_and_the_job_is_requeued(
    make_cluster: Any, with_tasks: bool
) -> None:
    cluster, cmd = make_cluster()
    job_id, victim = start_training(cmd, cluster, 2, "--requeue")
    index = cluster.node_names.index(victim)
    rank1 = rank_pid(cluster, job_id, 1)
    cluster.kill_node(index, with_jobs=with_tasks)
    if not with_tasks:  # its rank runs on without noded (until the fence guard)
        assert _alive(rank1)
    done = assert_requeued_and_ran_once(cluster, cmd, job_id, victim, "DOWN")
    assert victim not in hostlist.expand(done["nodelist"])  # again on the healthy nodes
    assert cmd("sinfo", "-h", "-n", victim, "-o", "%T").stdout.split() == ["down*"]
    guard = (cluster.state_dir / "log" / f"{victim}.log").read_text()
    if not with_tasks:  # the guard killed the orphaned rank, and says when
        line = next(ln for ln in guard.splitlines() if "component=noded-guard" in ln)
        stamp = line.split()[0].removeprefix("timestamp=")
        assert stamp[:4].isdigit() and "T" in stamp, line


def test_a_noded_restarted_3s_later_under_a_3_node_step_costs_the_step_nothing(
    make_cluster: Any,
) -> None:
    """issue 35: the new noded takes the step's tasks over from their supervisor and srun
    resumes its stream; the job is neither requeued nor restarted, and every rank ran
    once, its rank on the restarted node the same process throughout."""
    cluster, cmd = make_cluster(heartbeat_timeout_s=12.0)
    job_id, victim = start_training(cmd, cluster, 3, "--requeue")
    index = cluster.node_names.index(victim)
    rank2 = rank_pid(cluster, job_id, 2)
    cluster.kill_node(index, with_jobs=False)
    crashed = time.monotonic()
    time.sleep(3.0)  # the crash's length, not a synchronisation
    cluster.start_node(index)
    assert time.monotonic() - crashed < 12.0 - INTERVAL_S  # back before any fence
    done = cmd.wait_state(job_id, "COMPLETED", timeout=120)
    assert "restartCount" not in done, done
    assert not [e for e in done["events"] if e["event"] == "requeued"]
    log = steps_log(cluster, job_id)
    assert {e["run"] for e in log} == {"0"}
    for rank in ("0", "1", "2"):  # every step of every rank, once
        steps = [int(e["step"]) for e in log if e["rank"] == rank]
        assert steps == list(range(1, 41)), (rank, steps[:5], steps[-5:])
    node_log = (cluster.state_dir / "log" / f"{victim}.log").read_text()
    assert "step of an earlier noded taken over" in node_log
    assert "srun resumed its step" in node_log
    assert not _alive(rank2)  # it ended as it should: by finishing, not by a kill
    out = (cmd.cwd / f"train-{job_id}.out").read_text()
    assert "Node failure" not in out, out


def test_without_requeue_the_job_ends_node_fail_not_failed(make_cluster: Any) -> None:
    cluster, cmd = make_cluster()
    job_id, victim = start_training(cmd, cluster, 2, "--no-requeue")
    cluster.kill_node(cluster.node_names.index(victim), with_jobs=False)
    gone = cmd.wait_state(job_id, "NODE_FAIL", "FAILED", timeout=60)
    assert gone["state"] == "JOB_STATE_NODE_FAIL" and gone["reason"] == "NodeDown", gone
    assert "restartCount" not in gone
    wait_for(lambda: not run_pids(cluster, job_id, 0), 20, "every process of the job gone")
    acct = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State").stdout.split()
    assert acct == ["NODE_FAIL"]
    assert os.path.exists(cmd.cwd / f"train-{job_id}.out")
