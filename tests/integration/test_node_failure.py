"""Chaos with real processes: nodes die, nodeds crash, links go down; jobs resume once.

Every job here runs examples/train-checkpoint.py, which appends
``run=<restart count> host=<node> step=<n> time=<t>`` to steps.log in its checkpoint
directory at every step: that log proves where a job resumed and that no two copies
of it ever ran at once.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import threading
import time
from typing import Any

import pytest

from corral.errors import CorralError
from corral.localcluster.netns import available as netns_available
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train-checkpoint.py"
INTERVAL_S, TIMEOUT_S = 1.0, 5.0


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Any:
    def make(**kw: Any) -> tuple[LocalCluster, Commands]:
        # the state dir the factory gives this cluster: the checkpoints live in it
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
        assert c.state_dir == state
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return c, Commands(c, work)

    return make


def submit_training(cmd: Commands, *args: str, steps: int = 40, step_time: float = 0.25) -> str:
    out = cmd(
        "sbatch",
        "--parsable",
        "-o",
        "train-%j.out",
        *args,
        "--wrap",
        f"exec python3 {TRAIN} --steps {steps} --step-time {step_time}",
    )
    return out.stdout.strip()


def steps_log(cluster: LocalCluster, job_id: str) -> list[dict[str, str]]:
    path = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id) / "steps.log"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [dict(part.split("=", 1) for part in line.split()) for line in lines if line]


def wait_steps(cluster: LocalCluster, job_id: str, n: int, run: str = "0") -> None:
    wait_for(
        lambda: sum(1 for e in steps_log(cluster, job_id) if e["run"] == run) >= n,
        60,
        f"job {job_id} run {run} to take {n} steps",
    )


def node_state(cluster: LocalCluster, name: str) -> dict[str, Any]:
    nodes = cluster.client().call("GetNodes", {"names": [name]})["nodes"]
    return dict(nodes[0])


def assert_ran_once(cluster: LocalCluster, job_id: str, total: int) -> None:
    """Each run resumed where the last left off, and no copy wrote once a later one began."""
    log = steps_log(cluster, job_id)
    runs: dict[int, list[int]] = {}
    first_line: dict[int, int] = {}
    for i, e in enumerate(log):
        runs.setdefault(int(e["run"]), []).append(int(e["step"]))
        first_line.setdefault(int(e["run"]), i)
    for run, start in first_line.items():
        late = [e for e in log[start:] if int(e["run"]) < run]
        assert not late, f"run {run} began, yet an earlier copy still wrote: {late[:3]}"
    order = sorted(runs)
    for before, after in itertools.pairwise(order):
        # resumed from the checkpoint of the last step (or the one before, if the kill
        # fell between logging a step and saving it), never from the start
        assert runs[after][0] in (runs[before][-1], runs[before][-1] + 1), (before, runs)
    assert runs[order[-1]][-1] == total


def test_dead_node_job_requeued_resumes_and_no_requeue_ends_node_fail(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster()
    job_id = submit_training(cmd, "-N2", "--requeue")
    job = cmd.wait_state(job_id, "RUNNING")
    dead = job["batchHost"]
    index = cluster.node_names.index(dead)
    plain = cmd(
        "sbatch", "--parsable", "--no-requeue", "-w", dead, "--wrap", "sleep 300"
    ).stdout.strip()
    cmd.wait_state(plain, "RUNNING")
    wait_steps(cluster, job_id, 6)
    killed_at = time.monotonic()
    cluster.kill_node(index, with_jobs=True)  # the node dies with everything on it
    wait_for(
        lambda: node_state(cluster, dead).get("state") == "NODE_STATE_DOWN",
        TIMEOUT_S + 10,
        f"{dead} DOWN",
    )
    detected = time.monotonic() - killed_at
    assert detected <= TIMEOUT_S + INTERVAL_S + 1.0, detected
    assert node_state(cluster, dead)["reason"] == "Not responding"
    sinfo = cmd("sinfo", "-R", "-h", "-o", "%E|%H|%N").stdout
    day = time.strftime("%Y-%m-%dT")
    assert f"Not responding|{day}" in sinfo and f"|{dead}" in sinfo, sinfo
    show = cmd("scontrol", "show", "node", dead).stdout
    assert "State=DOWN+NOT_RESPONDING" in show and f"Reason=Not responding [root@{day}" in show
    # requeued onto the healthy nodes without waiting for the dead one
    wait_steps(cluster, job_id, 1, run="1")
    again = cmd.job(job_id)
    assert dead not in again["nodelist"] and again["restartCount"] == 1
    done = cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert done["restartCount"] == 1
    out = (cmd.cwd / f"train-{job_id}.out").read_text()
    assert "starting fresh (run 0" in out  # appended: the first run's output is kept
    resumed = [line for line in out.splitlines() if line.startswith("resumed from step")]
    assert len(resumed) == 1 and "(run 1 on" in resumed[0]
    assert int(resumed[0].split()[3]) >= 5  # 6 steps logged; the 6th maybe not saved
    assert_ran_once(cluster, job_id, 40)
    gone = cmd.wait_state(plain, "NODE_FAIL")
    assert gone["reason"] == "NodeDown"
    acct = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State,NodeList").stdout
    runs = acct.splitlines()
    assert runs[0] == f"NODE_FAIL|{job['nodelist']}" and len(runs) == 2
    assert runs[1].startswith("COMPLETED|")
    acct = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State").stdout
    assert acct.split() == ["COMPLETED"]


def test_noded_dies_jobs_survive_node_returns_fenced(make_cluster: Any) -> None:
    cluster, cmd = make_cluster()
    _skip_in_a_container(cluster)
    job_id = submit_training(cmd, steps=60, step_time=0.25)
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    index = cluster.node_names.index(host)
    wait_steps(cluster, job_id, 4)
    cluster.kill_node(index, with_jobs=False)  # only noded dies: the training runs on
    assert cluster.node_job_pids(index), "the job's processes should have survived noded"
    wait_steps(cluster, job_id, 1, run="1")  # requeued elsewhere at the timeout
    # the node comes back: its stale copy is killed before it is schedulable
    cluster.start_node(index)
    back = time.time()
    wait_for(lambda: not cluster.node_job_pids(index), 15, "the stale copy killed")
    wait_for(
        lambda: node_state(cluster, host).get("state") == "NODE_STATE_IDLE",
        20,
        f"{host} back",
    )
    cmd.wait_state(job_id, "COMPLETED", timeout=90)
    stale = [e for e in steps_log(cluster, job_id) if e["run"] == "0" and float(e["time"]) > back]
    assert not stale, f"the old copy ran on after its node came back: {stale}"


def test_noded_restart_takes_the_job_over_and_it_runs_once(make_cluster: Any) -> None:
    """kill -9 noded and start it again before the timeout (issue 35): the new noded takes
    the job over from its supervisor (it ran on meanwhile), so it is neither killed nor
    requeued, ends with its own exit status, and ran exactly once."""
    cluster, cmd = make_cluster(nodes=2)
    _skip_in_a_container(cluster)
    job_id = submit_training(cmd, steps=30, step_time=0.2)
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    index = cluster.node_names.index(host)
    wait_steps(cluster, job_id, 4)
    before = cluster.node_job_pids(index)
    cluster.kill_node(index, with_jobs=False)
    cluster.start_node(index)  # before the timeout
    log = (cluster.state_dir / "log" / f"{host}.log").read_text()
    assert "job of an earlier noded taken over" in log, log[-2000:]
    assert before <= cluster.node_job_pids(index) | _gone(before)  # the same processes
    done = cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert "restartCount" not in done and not [
        e for e in done["events"] if e["event"] == "requeued"
    ]
    assert {e["run"] for e in steps_log(cluster, job_id)} == {"0"}
    assert_ran_once(cluster, job_id, 30)
    root = _cgroup_root(cluster)
    if root is not None:  # no cgroup of any run is left behind
        wait_for(lambda: not list(root.glob("**/job_*")), 10, "the job's cgroup removed")


def _gone(pids: set[int]) -> set[int]:
    """Those of ``pids`` that ended meanwhile (a step of the training is a process)."""
    return {p for p in pids if not pathlib.Path(f"/proc/{p}").exists()}


def _skip_in_a_container(cluster: LocalCluster) -> None:
    if cluster.containers is not None:
        pytest.skip(
            "noded dying while its jobs live on: a container node's noded is its main "
            "process, so its death ends the container and every job in it"
        )


def _cgroup_root(cluster: LocalCluster) -> pathlib.Path | None:
    text = cluster.config_path.read_text()
    name = text.split('cgroup_root = "', 1)[1].split('"', 1)[0]
    for base in (pathlib.Path("/sys/fs/cgroup"), pathlib.Path("/sys/fs/cgroup/memory")):
        if (base / name).is_dir():
            return base / name
    return None


@pytest.mark.skipif(not netns_available()[0], reason="needs network namespaces (root)")
def test_partitioned_node_is_fenced_and_the_job_runs_once(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(isolation="netns")
    job_id = submit_training(cmd, steps=50, step_time=0.25)
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    index = cluster.node_names.index(host)
    wait_steps(cluster, job_id, 4)
    cluster.cut_node(index)
    wait_steps(cluster, job_id, 1, run="1")  # requeued on another node
    assert cmd.job(job_id)["batchHost"] != host
    cluster.cut_node(index, up=True)  # the partition heals
    wait_for(
        lambda: node_state(cluster, host).get("state") == "NODE_STATE_IDLE",
        30,
        f"{host} back and fenced",
    )
    cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert_ran_once(cluster, job_id, 50)
    assert not cluster.node_job_pids(index)


def test_a_beat_lost_to_a_frozen_ctld_is_beaten_again_not_registered_again(
    make_cluster: Any,
) -> None:
    # ctld frozen past a heartbeat's deadline (noded's 10 s), within the node timeout: the
    # node beats again when ctld thaws, and registers only if ctld asks (it does not here).
    # Registering after every failed beat fed an overloaded ctld's load (issue 29).
    cluster, _ = make_cluster(nodes=1, heartbeat_interval_s=0.5, heartbeat_timeout_s=60.0)
    if cluster.containers is not None:
        pytest.skip("ctld runs in a container here: the test freezes a local ctld process")
    ctld_log = cluster.state_dir / "log" / "ctld.log"
    node_log = cluster.state_dir / "log" / f"{cluster.node_names[0]}.log"

    def registrations() -> int:
        return ctld_log.read_text().count('event="node registered"')

    assert registrations() == 1
    pid = cluster.procs["ctld"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: "ctld unreachable" in node_log.read_text(), 30, "a beat to time out")
    finally:
        os.kill(pid, signal.SIGCONT)
    thawed = time.time()
    wait_for(
        lambda: float(node_state(cluster, cluster.node_names[0]).get("lastHeartbeat", 0)) > thawed,
        20,
        "a beat heard after the thaw",
    )
    assert registrations() == 1
    assert node_state(cluster, cluster.node_names[0])["state"] == "NODE_STATE_IDLE"


def test_scontrol_requeue_and_state_down(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(nodes=2)
    job_id = submit_training(cmd, steps=400, step_time=0.1)
    cmd.wait_state(job_id, "RUNNING")
    wait_steps(cluster, job_id, 3)
    cmd("scontrol", "requeuehold", job_id)
    job = cmd.wait_state(job_id, "PENDING")
    assert job["reason"] == "JobHeldUser" or job["reason"] == "JobHeldAdmin"
    cmd("scontrol", "release", job_id)
    wait_steps(cluster, job_id, 1, run="1")
    node = cmd.job(job_id)["batchHost"]
    cmd("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=maintenance")
    wait_steps(cluster, job_id, 1, run="2")
    assert node not in cmd.job(job_id)["nodelist"]
    sinfo = cmd("sinfo", "-h", "-n", node, "-o", "%T").stdout.split()
    assert sinfo == ["down*"]
    cmd("scontrol", "update", f"NodeName={node}", "State=RESUME")
    wait_for(lambda: node_state(cluster, node).get("state") == "NODE_STATE_IDLE", 20, "resumed")
    cmd("scancel", job_id)
    cmd.wait_state(job_id, "CANCELLED")
    assert_no_stray(cluster)


def test_requeue_and_operator_down_survive_a_ctld_restart(make_cluster: Any) -> None:
    """ctld loses nothing it acknowledged: a requeue asked while the node stops the job,
    and an operator's State=DOWN, both outlive a kill -9 of ctld."""
    # a long timeout: neither self-fencing nor DOWN may stand in for what is tested
    cluster, cmd = make_cluster(nodes=2, kill_wait_s=5.0, heartbeat_timeout_s=60.0)
    # the batch shell takes its time to stop (SIGKILL after kill_wait ends it): ctld dies
    # in between, so the new ctld alone hears how the run ended
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-o",
        "train-%j.out",
        "--wrap",
        f'trap "touch $CORRAL_CHECKPOINT_DIR/term-$SLURM_RESTART_COUNT; sleep 60" TERM\n'
        f"python3 {TRAIN} --steps 80 --step-time 0.1 & wait; wait",
    ).stdout.strip()
    cmd.wait_state(job_id, "RUNNING")
    wait_steps(cluster, job_id, 3)
    cmd("scontrol", "requeue", job_id)
    ckpt = cluster.state_dir / "checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: (ckpt / "term-0").exists(), 20, "the batch shell to get SIGTERM")
    cluster.kill_process("ctld")
    cluster.start_ctld()
    wait_steps(cluster, job_id, 1, run="1")  # requeued, not CANCELLED
    runs = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State").stdout.split()
    assert runs[0] == "REQUEUED", runs

    host = cmd.job(job_id)["batchHost"]
    cmd("scontrol", "update", f"NodeName={host}", "State=DOWN", "Reason=maint")
    wait_steps(cluster, job_id, 1, run="2")
    cluster.kill_process("ctld")
    cluster.start_ctld()
    # registered again, heartbeating, and still DOWN with the operator's reason
    wait_for(lambda: node_state(cluster, host).get("lastHeartbeat"), 20, "the node back")
    sinfo = cmd("sinfo", "-R", "-h", "-n", host, "-o", "%E|%T").stdout.split()
    assert sinfo == ["maint|down*"], sinfo  # sinfo gives DOWN Slurm's "*" always
    assert host not in cmd.job(job_id)["nodelist"]
    cmd("scontrol", "update", f"NodeName={host}", "State=RESUME")
    wait_for(lambda: node_state(cluster, host).get("state") == "NODE_STATE_IDLE", 20, "resumed")
    cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert_ran_once(cluster, job_id, 80)
    assert_no_stray(cluster)


def test_drain_lets_jobs_finish_places_nothing_and_resume_returns_the_node(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster(nodes=2)
    job_id = submit_training(cmd, steps=15, step_time=0.2)
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    wait_steps(cluster, job_id, 2)
    cmd("scontrol", "update", f"NodeName={host}", "State=DRAIN", "Reason=disk")
    assert cmd("sinfo", "-h", "-n", host, "-o", "%T").stdout.split() == ["draining"]
    later = cmd("sbatch", "--parsable", "-w", host, "--wrap", "true").stdout.strip()
    done = cmd.wait_state(job_id, "COMPLETED", timeout=60)  # it ran on, where it was
    assert done["batchHost"] == host and "restartCount" not in done
    wait_for(lambda: node_state(cluster, host).get("state") == "NODE_STATE_DRAIN", 20, "drained")
    assert cmd.job(later)["state"] == "JOB_STATE_PENDING"  # nothing new goes there
    cmd("scontrol", "update", f"NodeName={host}", "State=RESUME")
    cmd.wait_state(later, "COMPLETED", timeout=30)


def test_why_a_node_names_its_last_change_and_its_cause(make_cluster: Any) -> None:
    """issue 23: every change to a node goes through ctld's node state machine with a
    cause; `corral why NODE` shows the one that set its reason (an operator's drain, a
    heartbeat lost) and the last one, a drain's cause outlives a ctld restart (it is
    stored with the drain), and a job pending for a node that is out names it."""
    from corral.identity import current_identity

    cluster, cmd = make_cluster(nodes=2)
    drained, lost = cluster.node_names
    me = current_identity().user
    cmd("scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=disk")
    why = cmd("corral", "why", drained).stdout
    assert why.startswith(f"Node {drained} is DRAIN."), why
    assert "Reason: disk [" in why, why
    assert "], set by drained (its jobs finish, nothing new starts there), cause " in why
    assert f"cause rpc:UpdateNode {me}, at " in why, why
    cluster.kill_process("ctld")
    cluster.start_ctld()
    wait_for(lambda: node_state(cluster, drained).get("lastHeartbeat"), 20, f"{drained} back")
    why = cmd("corral", "why", drained).stdout  # registered again, its drain kept
    assert (
        f"set by drained (its jobs finish, nothing new starts there), cause rpc:UpdateNode {me}"
        in why
    ), why
    assert (
        f"Last change: registered (its noded registered), cause node:{drained} RegisterNode" in why
    )
    cluster.kill_node(cluster.node_names.index(lost))
    wait_for(
        lambda: node_state(cluster, lost).get("state") == "NODE_STATE_DOWN",
        TIMEOUT_S + 10,
        f"{lost} DOWN",
    )
    why = cmd("corral", "why", lost).stdout
    assert why.startswith(f"Node {lost} is DOWN*."), why
    assert "Reason: Not responding [root@" in why, why
    assert "set by heartbeat_lost (silent past the heartbeat timeout: DOWN), " in why, why
    assert "cause monitor:heartbeat" in why, why
    pinned = cmd("sbatch", "--parsable", "-w", lost, "--wrap", "true").stdout.strip()
    wait_for(lambda: "UnavailableNodes" in cmd.job(pinned).get("reason", ""), 20, "its reason")
    why = cmd("corral", "why", pinned).stdout
    assert f"Node {lost} is DOWN*." in why and "cause monitor:heartbeat" in why, why
    cmd("scancel", pinned)


def test_a_report_held_by_a_restarted_noded_still_arrives(make_cluster: Any) -> None:
    """A job ends while ctld is away; noded is killed and started again before ctld is
    back: its report, kept in the spool, reaches ctld (the job is not run again)."""
    cluster, cmd = make_cluster(nodes=1, heartbeat_timeout_s=60.0)
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-o",
        "once-%j.out",
        "--wrap",
        "echo ran >> runs; while [ ! -e go ]; do sleep 0.05; done",
    ).stdout.strip()
    cmd.wait_state(job_id, "RUNNING")
    wait_for(lambda: (cmd.cwd / "runs").exists(), 20, "the job to start")
    cluster.kill_process("ctld")
    (cmd.cwd / "go").touch()  # it ends now; nobody can hear of it
    spool = cluster.state_dir / "spool" / cluster.node_names[0]
    wait_for(
        lambda: not list(spool.glob("state/job*.json")) and (spool / "reports.pb").exists(),
        20,
        "the job done, its report waiting in the spool",
    )
    cluster.kill_node(0, with_jobs=False)
    cluster.start_ctld()
    cluster.start_node(0)
    job = cmd.wait_state(job_id, "COMPLETED")
    assert "restartCount" not in job
    assert (cmd.cwd / "runs").read_text() == "ran\n"  # ran once
    wait_for(lambda: not (spool / "reports.pb").exists(), 20, "the delivered report dropped")


def assert_no_stray(cluster: LocalCluster) -> None:
    for i in range(cluster.nodes):
        wait_for(lambda i=i: not cluster.node_job_pids(i), 15, f"node {i} clean")


def test_stalled_job_is_named_and_requeued(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(nodes=2, sample_interval_s=0.5)
    job_id = submit_training(cmd, "--progress-timeout=2", steps=60, step_time=0.2)
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    index = cluster.node_names.index(host)
    wait_steps(cluster, job_id, 3)
    (pid,) = cluster.node_job_pids(index)  # the training process (exec'd by the script)
    os.kill(pid, signal.SIGSTOP)  # hung: alive, but no more progress
    wait_steps(cluster, job_id, 1, run="1")
    job = cmd.job(job_id)
    requeued = [e for e in job["events"] if e["event"] == "requeued"]
    assert f"progress stalled on node {host} rank 0" in requeued[0]["detail"]
    acct = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State,Reason").stdout
    assert f"NODE_FAIL|progress stalled on node {host} rank 0" in acct.splitlines()[0]
    cmd.wait_state(job_id, "COMPLETED", timeout=90)
    assert_ran_once(cluster, job_id, 60)


def rank_pid(cluster: LocalCluster, index: int, rank: int) -> int:
    """The pid of the srun task of ``rank`` on node ``index`` (its SLURM_PROCID)."""
    want = f"SLURM_PROCID={rank}".encode()
    for pid in cluster.node_job_pids(index):
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env:
            return pid
    raise AssertionError(f"no task of rank {rank} on node {index}")


def test_stalled_srun_rank_on_another_node_is_named_and_requeued(make_cluster: Any) -> None:
    """Every srun task has its own progress file: a hung rank on a node that is not
    the batch host is found there, named (node and rank) and the job requeued."""
    cluster, cmd = make_cluster(nodes=2, sample_interval_s=0.5)
    job_id = cmd(
        "sbatch",
        "--parsable",
        "-N2",
        "--ntasks-per-node=1",
        "--progress-timeout=2",
        "-o",
        "train-%j.out",
        "--wrap",
        f"srun python3 {TRAIN} --steps 60 --step-time 0.2",
    ).stdout.strip()
    host = cmd.wait_state(job_id, "RUNNING")["batchHost"]
    other = next(n for n in cluster.node_names if n != host)

    def taken(run: str, rank: str) -> int:
        return sum(1 for e in steps_log(cluster, job_id) if (e["run"], e["rank"]) == (run, rank))

    wait_for(lambda: taken("0", "1") >= 3, 60, "rank 1 to take 3 steps")
    os.kill(rank_pid(cluster, cluster.node_names.index(other), 1), signal.SIGSTOP)
    wait_for(lambda: taken("1", "1") >= 1, 60, "the requeued run's rank 1 to take a step")
    named = f"progress stalled on node {other} rank 1 (step {job_id}.0)"
    requeued = [e for e in cmd.job(job_id)["events"] if e["event"] == "requeued"]
    assert named in requeued[0]["detail"], requeued
    acct = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State,Reason").stdout
    assert f"NODE_FAIL|{named}" in acct.splitlines()[0]
    assert named in cmd("corral", "why", job_id).stdout
    cmd.wait_state(job_id, "COMPLETED", timeout=90)
    log = steps_log(cluster, job_id)
    first_rerun = next(i for i, e in enumerate(log) if e["run"] == "1")
    assert not [e for e in log[first_rerun:] if e["run"] == "0"], "the stalled copy ran on"
    rerun = [int(e["step"]) for e in log if (e["run"], e["rank"]) == ("1", "0")]
    assert rerun[0] > 3 and rerun[-1] == 60  # resumed from rank 0's checkpoint
    assert_no_stray(cluster)


def test_ctld_killed_during_concurrent_submits_loses_and_doubles_nothing(
    make_cluster: Any, tmp_path: pathlib.Path
) -> None:
    cluster, _ = make_cluster(nodes=1)
    acked: dict[str, int] = {}
    lock = threading.Lock()

    def submitter(thread: int) -> None:
        client = cluster.client()
        for i in range(250):
            name = f"t{thread}-{i}"
            spec = {"name": name, "script": "#!/bin/sh\ntrue\n", "workDir": str(tmp_path)}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    reply = client.call("SubmitJob", {"spec": {**spec, "hold": True}})
                except (OSError, CorralError):
                    time.sleep(0.05)  # ctld is away; this submit was not acknowledged
                    name = f"{name}+"  # a new request: the lost one may or may not exist
                    spec["name"] = name
                    continue
                with lock:
                    acked[name] = int(reply["jobId"])
                break

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) >= 300, 60, "300 acknowledged submits")
    cluster.kill_process("ctld")  # SIGKILL mid-stream
    cluster.start_ctld()
    for t in threads:
        t.join(120)
    assert len(acked) == 1000
    jobs = cluster.client().call("GetJobs", {})["jobs"]
    by_name: dict[str, list[int]] = {}
    for j in jobs:
        by_name.setdefault(j["spec"]["name"], []).append(int(j["jobId"]))
    missing = [n for n in acked if n not in by_name]
    doubled = {n: ids for n, ids in by_name.items() if len(ids) > 1}
    assert not missing and not doubled, (missing[:5], doubled)
    assert all(by_name[n] == [i] for n, i in acked.items())
