"""Elastic jobs on real daemons (docs/reliability.md): a ``-N 2-3 --elastic --requeue``
job on three nodes loses one (its noded killed with its processes) and its next run
starts at once on the two it kept, its batch host still rank 0, every variable a
framework reads telling the new shape."""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

INTERVAL_S, TIMEOUT_S = 1.0, 5.0

# each run records its batch environment and, through srun, every rank's view; the
# first run then waits (to be cut short by the node failure), the second ends once
# the test has read what it wrote
SCRIPT = """#!/bin/sh
d="$CORRAL_CHECKPOINT_DIR"; r="$SLURM_RESTART_COUNT"
env | grep -E '^(SLURM|CORRAL_)' | sort > "$d/batch.$r.tmp" && mv "$d/batch.$r.tmp" "$d/batch.$r"
srun sh -c 'echo "$SLURM_PROCID $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT \
$SLURMD_NODENAME" > "$CORRAL_CHECKPOINT_DIR/rank.$SLURM_RESTART_COUNT.$SLURM_PROCID"'
touch "$d/ranks.$r"
if [ "$r" = 0 ]; then sleep 300; fi
while [ ! -e "$d/go" ]; do sleep 0.1; done
"""


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Any:
    def make(**kw: Any) -> tuple[LocalCluster, Commands]:
        state = cluster_factory.base / f"cluster{len(cluster_factory.started)}"
        kw.setdefault("nodes", 3)
        kw.setdefault("gpus_per_node", 0)
        kw.setdefault("heartbeat_interval_s", INTERVAL_S)
        kw.setdefault("heartbeat_timeout_s", TIMEOUT_S)
        c = cluster_factory(noded_config=f'checkpoint_dir = "{state / "checkpoints"}"', **kw)
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return c, Commands(c, work)

    return make


def batch_env(path: pathlib.Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def ranks(ckpt: pathlib.Path, run: int) -> list[list[str]]:
    return sorted(
        (p.read_text().split() for p in ckpt.glob(f"rank.{run}.*")), key=lambda r: int(r[0])
    )


def test_elastic_job_loses_a_node_and_runs_on_at_two_at_once(make_cluster: Any) -> None:
    cluster, cmd = make_cluster()
    script = cmd.cwd / "elastic.sh"
    script.write_text(SCRIPT)
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-N",
        "2-3",
        "--elastic",
        "--requeue",
        "-o",
        "el-%j.out",
        str(script),
    ).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: (ckpt / "ranks.0").exists(), 60, "the first run's ranks")
    first = batch_env(ckpt / "batch.0")
    assert first["SLURM_NNODES"] == "3" and first["SLURM_NTASKS"] == "3"
    assert "SLURM_JOB_PREVIOUS_NUM_NODES" not in first
    before = ranks(ckpt, 0)
    assert [r[:4] for r in before] == [[str(i), str(i), "0", "3"] for i in range(3)]
    host = job["batchHost"]
    dead = next(n for n in cluster.node_names if n != host)
    killed = time.monotonic()
    cluster.kill_node(cluster.node_names.index(dead), with_jobs=True)
    # requeued at the timeout and started at once on the two nodes it kept
    wait_for(lambda: (ckpt / "ranks.1").exists(), TIMEOUT_S + 30, "the second run's ranks")
    restarted = time.monotonic() - killed
    second = batch_env(ckpt / "batch.1")
    kept = [n for n in cluster.node_names if n != dead]
    assert second["SLURM_NNODES"] == "2" and second["SLURM_JOB_NUM_NODES"] == "2"
    assert second["SLURM_NTASKS"] == "2" and second["SLURM_RESTART_COUNT"] == "1"
    assert second["SLURM_JOB_PREVIOUS_NUM_NODES"] == "3"
    assert second["SLURM_JOB_PREVIOUS_NTASKS"] == "3"
    assert second["SLURMD_NODENAME"] == host  # rank 0 kept its node
    assert dead not in second["SLURM_JOB_NODELIST"]
    assert cmd("scontrol", "show", "hostnames", second["SLURM_JOB_NODELIST"]).stdout.split() == kept
    after = ranks(ckpt, 1)
    assert [r[:4] for r in after] == [["0", "0", "0", "2"], ["1", "1", "0", "2"]]
    assert after[0][6] == host and after[0][4] == before[0][4]  # MASTER_ADDR: rank 0's node
    assert after[0][4:6] == after[1][4:6]  # one rendezvous
    (ckpt / "go").touch()
    done = cmd.wait_state(job_id, "COMPLETED", timeout=60)
    assert done["restartCount"] == 1 and done["numNodes"] == 2
    assert restarted < TIMEOUT_S + 20, restarted
    # ended for good: its checkpoint directory goes (it was kept across the requeue)
    wait_for(lambda: not ckpt.exists(), 20, "the checkpoint directory removed")
    assert not list(ckpt.parent.glob(".*gone*"))


TRAIN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train-checkpoint.py"


def steps_log(ckpt: pathlib.Path) -> list[dict[str, str]]:
    try:
        lines = (ckpt / "steps.log").read_text().splitlines()
    except OSError:
        return []
    return [dict(part.split("=", 1) for part in line.split()) for line in lines if line]


def start_stopper(
    cluster: LocalCluster, cmd: Any, out: str
) -> tuple[str, dict[str, Any], pathlib.Path]:
    """An elastic 2-3 node training that saves when warned and exits (--stop-on-signal),
    running and five steps in: (its id, the job, its checkpoint directory)."""
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-N",
        "2-3",
        "--elastic",
        "--requeue",
        "-o",
        f"{out}-%j.out",
        "--wrap",
        f"exec python3 {TRAIN} --steps 30 --step-time 0.2 --save-every 1000 --stop-on-signal",
    ).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: len(steps_log(ckpt)) >= 5, 60, "five steps")
    return job_id, job, ckpt


def test_a_drain_signals_the_job_which_saves_and_is_requeued_losing_no_step(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false")
    job_id, job, ckpt = start_stopper(cluster, cmd, "tr")
    drained = next(n for n in cluster.node_names if n != job["batchHost"])
    began = time.monotonic()
    cmd("scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=swap a DIMM")
    # it saved at the signal (it saves on nothing else) and exited: requeued at once,
    # long before the lead time (120 s), onto the two nodes it kept
    wait_for(lambda: any(e["run"] == "1" for e in steps_log(ckpt)), 30, "the second run")
    assert time.monotonic() - began < 30
    again = cmd.job(job_id)
    assert again["restartCount"] == 1 and drained not in again["nodelist"]
    assert again["numNodes"] == 2 and again["batchHost"] == job["batchHost"]
    done = cmd.wait_state(job_id, "COMPLETED", timeout=60)
    assert done["restartCount"] == 1
    log = steps_log(ckpt)
    first = [int(e["step"]) for e in log if e["run"] == "0"]
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    # resumed right after its last logged step (or at it, had the signal come between
    # logging and counting): no completed step lost, none done twice but that one
    assert second[0] in (first[-1], first[-1] + 1) and second[-1] == 30
    out = (cmd.cwd / f"tr-{job_id}.out").read_text()
    assert "signal SIGUSR1: checkpoint at step" in out and "resumed from step" in out
    acct = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State,Reason").stdout
    runs = acct.splitlines()
    assert runs[0].startswith("REQUEUED|") and runs[1].startswith("COMPLETED|"), runs
    # the interruption as ETTR counts it: a drain, the lost work since the save it made
    # at the signal (under a second here), the restart's overhead
    fields = "Interruptions,InterruptCauses,RestartOverhead,LostTime,ETTR,Elapsed"
    line = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields).stdout.strip()
    count, causes, overhead, lost, ratio, _ = line.split("|")
    assert (count, causes) == ("1", "drain:1"), line
    assert lost in ("00:00:00", "00:00:01"), line  # it saved at the signal
    assert overhead < "00:00:10" and ratio.endswith("%") and float(ratio[:-1]) > 50, line
    report = cmd("corral", "report", "--ettr", "--start", "now-3600").stdout.splitlines()
    mine = [r for r in report if r.split()[:1] == [done["user"]]]
    assert mine and mine[0].split()[3:5] == ["1", "1"], report  # one job, one interruption


def test_with_growth_on_a_shrunk_job_returns_to_three_at_its_next_checkpoint(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false\nelastic_grow = true")
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-N",
        "2-3",
        "--elastic",
        "--requeue",
        "-o",
        "gr-%j.out",
        "--wrap",
        f"exec python3 {TRAIN} --steps 80 --step-time 0.2 --stop-on-signal",
    ).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    assert job["numNodes"] == 3
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: len(steps_log(ckpt)) >= 3, 60, "three steps")
    dead = next(n for n in cluster.node_names if n != job["batchHost"])
    index = cluster.node_names.index(dead)
    cluster.kill_node(index, with_jobs=True)
    wait_for(lambda: any(e["run"] == "1" for e in steps_log(ckpt)), 30, "the shrunk run")
    assert cmd.job(job_id)["numNodes"] == 2
    cluster.start_node(index)  # the node is back: the job is offered its larger shape
    wait_for(lambda: any(e["run"] == "2" for e in steps_log(ckpt)), 60, "the grown run")
    grown = cmd.job(job_id)
    assert grown["numNodes"] == 3 and grown["batchHost"] == job["batchHost"]
    done = cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert done["restartCount"] == 2
    log = steps_log(ckpt)
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    third = [int(e["step"]) for e in log if e["run"] == "2"]
    assert third[0] in (second[-1], second[-1] + 1) and third[-1] == 80  # nothing lost
    fields = "Interruptions,InterruptCauses"
    line = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields).stdout.strip()
    assert line == "2|node_fail:1,grow:1", line
    nodes = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "NNodes").stdout.split()
    assert nodes == ["3", "2", "3"], nodes
    # the failure lost what the job did after its last checkpoint mark: this job trains
    # on its batch host alone, which saved every step until ctld's verdict killed it, so
    # at most a heartbeat's staleness; the growth's save came at the signal (0 lost)
    runs = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "LostTime").stdout.split()
    assert runs[0] == "00:00:00" and int(runs[-1].split(":")[-1]) <= INTERVAL_S + 1, runs


def test_a_maintenance_reservation_signals_the_job_which_saves_and_runs_elsewhere(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false")
    job_id, job, ckpt = start_stopper(cluster, cmd, "mt")
    node = next(n for n in cluster.node_names if n != job["batchHost"])
    # a minute away, within the lead time (120 s): the job is warned at the monitor's tick
    cmd(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=fix",
        "StartTime=now+60",
        "Duration=10",
        f"Nodes={node}",
        "Users=root",
        "Flags=MAINT",
    )
    wait_for(lambda: any(e["run"] == "1" for e in steps_log(ckpt)), 30, "the second run")
    again = cmd.job(job_id)
    assert node not in again["nodelist"] and again["numNodes"] == 2  # not onto the window
    done = cmd.wait_state(job_id, "COMPLETED", timeout=60)
    log = steps_log(ckpt)
    first = [int(e["step"]) for e in log if e["run"] == "0"]
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    assert second[0] in (first[-1], first[-1] + 1) and second[-1] == 30  # saved at the signal
    line = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "InterruptCauses,LostTime")
    assert line.stdout.strip() in ("maintenance:1|00:00:00", "maintenance:1|00:00:01")
    assert done["restartCount"] == 1


def test_a_spare_replaces_a_failed_node_within_one_pass(make_cluster: Any) -> None:
    # keys after the partition table's: the debug partition keeps its last idle node
    cluster, cmd = make_cluster(nodes=4, extra_config="spare_nodes = 1\n")
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-N",
        "3",
        "--exclusive",
        "--requeue",
        "-o",
        "sp-%j.out",
        "--wrap",
        f"exec python3 {TRAIN} --steps 40 --step-time 0.2",
    ).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    assert job["nodelist"] == "node[01-03]"
    other = cmd("sbatch", "--parsable", "--exclusive", "--wrap", "sleep 60").stdout.strip()
    sinfo = cmd("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
    assert "node04 spare" in sinfo, sinfo
    wait_for(lambda: cmd.job(other).get("reason") == "Resources", 20, "the other job waits")
    # the queued job comes first in the queue: in the pass of the requeue it would take
    # a node the failed job kept, but for that job's claim on them
    above = int(cmd.job(job_id).get("priority", 0)) + 1000
    cmd("scontrol", "update", f"JobId={other}", f"Priority={above}")
    assert int(cmd.job(other)["priority"]) == above
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: len(steps_log(ckpt)) >= 3, 60, "three steps")
    cluster.kill_node(1, with_jobs=True)  # node02
    wait_for(
        lambda: (
            cluster.client().call("GetNodes", {"names": ["node02"]})["nodes"][0].get("state")
            == "NODE_STATE_DOWN"
        ),
        TIMEOUT_S + 10,
        "node02 DOWN",
    )
    down = time.monotonic()
    # requeued at the verdict and started in the pass it wakes, on the spare
    wait_for(lambda: cmd.job(job_id).get("restartCount") == 1, 5, "requeued")
    wait_for(lambda: cmd.job(job_id).get("state") == "JOB_STATE_RUNNING", 5, "running again")
    assert time.monotonic() - down < 3  # no queue wait: within a pass (sched_interval 2 s)
    assert cmd.job(job_id)["nodelist"] == "node[01,03-04]"
    assert cmd.job(other)["state"] == "JOB_STATE_PENDING"
    cmd.wait_state(job_id, "COMPLETED", timeout=60)


TORCH_PY = os.environ.get("CORRAL_TORCH_PYTHON", "")
TORCH_JOB = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch-elastic.sh"
TORCH_ENV = {
    "TORCH_PYTHON": TORCH_PY,
    "TORCH_SCRIPT": str(TORCH_JOB.parent / "torch-elastic.py"),
    "STEPS": "40",
}


def _torch_done(cmd: Any, job_id: str, ckpt: pathlib.Path) -> dict[str, Any]:
    """The job COMPLETED; if not, what its ranks wrote (pytest shows it with the failure)."""
    try:
        done: dict[str, Any] = cmd.wait_state(job_id, "COMPLETED", timeout=180)
    except AssertionError:
        print(f"----- job {job_id}: {cmd.job(job_id)}")
        for path in (cmd.cwd / f"torch-elastic-{job_id}.out", ckpt / "steps.log"):
            print(f"----- {path}\n{path.read_text() if path.exists() else '(none)'}")
        raise
    return done


# torch's start-up in each rank and two runs: past the default per-test timeout on a slow
# machine, within the 120 s + 180 s the test waits
@pytest.mark.timeout(330)
@pytest.mark.skipif(not TORCH_PY, reason="set CORRAL_TORCH_PYTHON to a python with torch")
def test_torch_ddp_resumes_at_world_size_two_after_a_node_dies(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false")
    job_id = cmd("sbatch", "--parsable", str(TORCH_JOB), env=TORCH_ENV).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    # past its first checkpoint (every 5 steps) at world size 3
    wait_for(lambda: len(steps_log(ckpt)) >= 7, 120, "seven steps at world size 3")
    assert {e["world"] for e in steps_log(ckpt)} == {"3"}
    dead = next(n for n in cluster.node_names if n != job["batchHost"])
    cluster.kill_node(cluster.node_names.index(dead), with_jobs=True)
    done = _torch_done(cmd, job_id, ckpt)
    assert done["restartCount"] == 1 and done["numNodes"] == 2
    log = steps_log(ckpt)
    first = [int(e["step"]) for e in log if e["run"] == "0"]
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    assert {e["world"] for e in log if e["run"] == "1"} == {"2"}
    # resumed from its last save (a multiple of 5), at most 5 steps back: none skipped
    assert second[0] - 1 == (second[0] - 1) // 5 * 5 and first[-1] - 5 <= second[0] - 1
    assert second[-1] == 40
    out = (cmd.cwd / f"torch-elastic-{job_id}.out").read_text()
    assert "run 1: world size 2 (was 3)" in out and "done: 40 steps" in out


@pytest.mark.timeout(330)
@pytest.mark.skipif(not TORCH_PY, reason="set CORRAL_TORCH_PYTHON to a python with torch")
def test_torch_ddp_saves_on_a_drain_and_resumes_at_world_size_two(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false")
    job_id = cmd("sbatch", "--parsable", str(TORCH_JOB), env=TORCH_ENV).stdout.strip()
    job = cmd.wait_state(job_id, "RUNNING")
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: len(steps_log(ckpt)) >= 3, 120, "three steps at world size 3")
    drained = next(n for n in cluster.node_names if n != job["batchHost"])
    cmd("scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=ecc")
    done = _torch_done(cmd, job_id, ckpt)
    assert done["restartCount"] == 1 and done["numNodes"] == 2
    log = steps_log(ckpt)
    first = [int(e["step"]) for e in log if e["run"] == "0"]
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    # the ranks agreed on the warning, rank 0 saved that very step: none lost or redone
    assert second[0] == first[-1] + 1 and second[-1] == 40
    out = (cmd.cwd / f"torch-elastic-{job_id}.out").read_text()
    assert "warned: saved at step" in out and "run 1: world size 2 (was 3)" in out
    line = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "InterruptCauses").stdout
    assert line.strip() == "drain:1"
