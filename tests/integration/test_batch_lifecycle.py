"""Batch jobs through the real daemons, driven only by the installed commands and the API."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from corral.testing import LocalCluster
from tests.conftest import Commands, pid_alive, wait_for

SCRIPT = """#!/bin/bash
#SBATCH --job-name=lifecycle
#SBATCH -o %x-%j.out
#SBATCH --gres=gpu:2
echo "job=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodes=$SLURM_JOB_NODELIST"
echo "ntasks=$SLURM_NTASKS nnodes=$SLURM_NNODES part=$SLURM_JOB_PARTITION"
echo "gpus=$SLURM_JOB_GPUS cuda=$CUDA_VISIBLE_DEVICES cluster=$SLURM_CLUSTER_NAME"
echo "submit_dir=$SLURM_SUBMIT_DIR pwd=$(pwd) arg=$1"
echo "to stderr" >&2
"""


def test_submit_runs_and_writes_output(cmd: Commands) -> None:
    (cmd.cwd / "job.sh").write_text(SCRIPT)
    out = cmd("sbatch", "job.sh", "first-arg")
    assert out.stdout.startswith("Submitted batch job ")
    job_id = out.stdout.split()[-1]
    job = cmd.wait_state(job_id, "COMPLETED")
    assert [e["event"] for e in job["events"]] == ["submitted", "started", "exited"]
    text = (cmd.cwd / f"lifecycle-{job_id}.out").read_text()
    assert f"job={job_id} name=lifecycle nodes=node01" in text
    assert "ntasks=1 nnodes=1 part=debug" in text
    assert "gpus=0,1 cuda=0,1 cluster=corral" in text
    assert f"submit_dir={cmd.cwd} pwd={cmd.cwd} arg=first-arg" in text
    assert "to stderr" in text  # no -e: stderr goes to the same file


def test_parsable_and_flags_override_directives(cmd: Commands) -> None:
    (cmd.cwd / "job.sh").write_text(
        "#!/bin/sh\n#SBATCH -J fromscript\n#SBATCH -o a.out\necho $SLURM_JOB_NAME\n"
    )
    out = cmd("sbatch", "--parsable", "-J", "fromflag", "-e", "err-%j.txt", "job.sh")
    job_id = out.stdout.strip()
    assert job_id.isdigit() and out.stdout == f"{job_id}\n"
    cmd.wait_state(job_id, "COMPLETED")
    assert (cmd.cwd / "a.out").read_text() == "fromflag\n"
    assert (cmd.cwd / f"err-{job_id}.txt").exists()


def test_failing_script_is_failed_with_its_exit_code(cmd: Commands) -> None:
    job_id = cmd("sbatch", "--parsable", "--wrap", "exit 3").stdout.strip()
    job = cmd.wait_state(job_id, "FAILED")
    assert job.get("exitCode") == 3
    acct = cmd.cluster.client().query_accounting({"filter": {"jobIds": [job_id]}})
    assert acct["jobs"][0]["state"] == "JOB_STATE_FAILED"


def test_cancel_kills_the_whole_process_group(cmd: Commands) -> None:
    script = "#!/bin/bash\nsleep 300 &\necho $$ $! > pids\nwait\n"
    (cmd.cwd / "long.sh").write_text(script)
    job_id = cmd("sbatch", "--parsable", "long.sh").stdout.strip()
    cmd.wait_state(job_id, "RUNNING")
    pids_file = cmd.cwd / "pids"
    text = wait_for(lambda: pids_file.exists() and pids_file.read_text().strip(), 20, "pids")
    pids = [int(p) for p in text.split()]
    alive = _pid_alive_on(cmd.cluster, cmd.job(job_id)["batchHost"])
    assert all(alive(p) for p in pids)
    cmd("scancel", job_id)
    job = cmd.wait_state(job_id, "CANCELLED")
    assert [e["event"] for e in job["events"]][-2:] == ["cancel_requested", "exited"]
    wait_for(lambda: not any(alive(p) for p in pids), 20, "job processes to be gone")


def _pid_alive_on(cluster: LocalCluster, node: str) -> Callable[[int], bool]:
    """Whether a pid the job saw is alive: a container node's pids are its own (its PID
    namespace), asked of the container; a zombie is dead."""
    if cluster.containers is None:
        return pid_alive
    name = cluster.containers.name(cluster.node_names.index(node))

    def alive(pid: int) -> bool:
        ps = ["podman", "exec", name, "ps", "-o", "stat=", "-p", str(pid)]
        state = subprocess.run(ps, capture_output=True, text=True, check=False, timeout=30)
        return bool(state.stdout.strip()) and not state.stdout.strip().startswith("Z")

    return alive


def test_two_jobs_get_distinct_gpus(cmd: Commands) -> None:
    ids = [
        cmd(
            "sbatch",
            "--parsable",
            "-w",
            "node02",
            "--gres=gpu:3",
            "-o",
            f"g{i}.out",
            "--wrap",
            "echo $SLURM_JOB_GPUS/$CUDA_VISIBLE_DEVICES; sleep 2",
        ).stdout.strip()
        for i in range(2)
    ]
    for job_id in ids:
        cmd.wait_state(job_id, "COMPLETED")
    seen = sorted((cmd.cwd / f"g{i}.out").read_text().strip() for i in range(2))
    assert seen == ["0,1,2/0,1,2", "3,4,5/3,4,5"]


def test_bad_requests_give_clear_errors_and_create_no_job(cmd: Commands) -> None:
    before = cmd.cluster.client().get_cluster_info({})["nextJobId"]
    (cmd.cwd / "bad.sh").write_text("#!/bin/sh\n#SBATCH --nodes=lots\ntrue\n")
    # Slurm's sbatch exits 255 (exit(-1)) on a bad option or time format, 1 when the
    # controller refuses the job
    cases = [
        (["sbatch", "bad.sh"], "Invalid node count specification: lots", 255),
        (["sbatch", "--bogus-flag", "--wrap", "true"], "unrecognized option '--bogus-flag'", 255),
        (["sbatch", "-p", "nosuch", "--wrap", "true"], "Invalid partition name specified", 1),
        (
            ["sbatch", "--gres=gpu:16", "--wrap", "true"],
            "Requested node configuration is not available",
            1,
        ),
        (
            ["sbatch", "-N", "3", "--wrap", "true"],
            "Requested node configuration is not available",
            1,
        ),
        (["sbatch", "--time=soon", "--wrap", "true"], "Invalid --time specification", 255),
        (["sbatch", "--gres=tpu:1", "--wrap", "true"], "Invalid generic resource", 1),
    ]
    for argv, message, code in cases:
        proc = cmd(*argv, check=False)
        assert proc.returncode == code, (argv, proc.returncode)
        # getopt's own words carry no "error: ", as a real 22.05 prints them
        getopt = "unrecognized option" in message
        assert proc.stderr.startswith("sbatch: " if getopt else "sbatch: error: "), proc.stderr
        assert message in proc.stderr, (argv, proc.stderr)
    (cmd.cwd / "noshebang.sh").write_text("echo hi\n")
    proc = cmd("sbatch", "noshebang.sh", check=False)
    assert proc.returncode == 1 and "first line must start with #!" in proc.stderr
    assert cmd.cluster.client().get_cluster_info({})["nextJobId"] == before
    assert cmd.cluster.client().get_jobs({}).get("jobs", []) == []


def test_scancel_unknown_job_is_an_error_and_a_finished_one_is_silent(cmd: Commands) -> None:
    # a job id that names no job: Slurm's check of the given ids prints it and exits 1
    # (issue 22: a typo must not pass for a cancel); -Q keeps the exit code, not the line
    unknown = "scancel: error: Kill job error on job id 424242: Invalid job id specified\n"
    proc = cmd("scancel", "424242", check=False)
    assert (proc.returncode, proc.stderr) == (1, unknown)
    proc = cmd("scancel", "-Q", "424242", check=False)
    assert (proc.returncode, proc.stderr) == (1, "")
    # a finished job: nothing to do, said only with -v (Slurm 22.05's ESLURM_ALREADY_DONE)
    done = cmd("sbatch", "--parsable", "--wrap", "true").stdout.strip()
    cmd.wait_state(done, "COMPLETED")
    proc = cmd("scancel", done, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    proc = cmd("scancel", "-v", "424242", check=False)
    assert (proc.returncode, proc.stderr) == (1, "scancel: Terminating job 424242\n" + unknown)
    # filters act on active jobs only, silently: the finished job is not an error
    proc = cmd("scancel", "-n", "wrap", check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert cmd.job(done)["state"] == "JOB_STATE_COMPLETED"
    assert cmd("scancel", "-t", "CD", "-u", "root", check=False).returncode == 0
    proc = cmd("scancel", "-p", "debug", "-u", "root", check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert cmd.job(done)["state"] == "JOB_STATE_COMPLETED"


@pytest.mark.parametrize("cluster", ["sqlite", "postgresql"], indirect=True)
def test_ctld_crash_loses_nothing_acknowledged(cluster: LocalCluster, cmd: Commands) -> None:
    held = cmd("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    running = cmd(
        "sbatch", "--parsable", "-o", "r.out", "--wrap", "touch started; sleep 2; echo done"
    ).stdout.strip()
    # RUNNING is committed before the launch is sent: wait until the node really runs it
    # (a job ctld never got to send is requeued instead, see test_cluster's reconcile tests)
    wait_for(lambda: (cmd.cwd / "started").exists(), 30, "the job to start on its node")
    cluster.kill_process("ctld")  # SIGKILL: no chance to flush anything
    cluster.start_ctld()
    assert cmd.job(held)["state"] == "JOB_STATE_PENDING"
    assert cmd.job(held).get("reason") == "JobHeldUser"
    # the job kept running on its node; its exit report reaches the new ctld
    job = cmd.wait_state(running, "COMPLETED", timeout=40)
    assert (cmd.cwd / "r.out").read_text() == "done\n"
    assert job["events"][-1]["cause"].startswith("node:node01")
    assert "restartCount" not in job  # it ran once, not requeued
    # the held job, released after the crash, runs like any other
    cluster.client().update_job({"jobIds": [held], "action": "JOB_UPDATE_RELEASE"})
    cmd.wait_state(held, "COMPLETED")
