"""Slurm 22.05 behaviour that scripts and tools rely on, checked through the real daemons.

Each test names the Slurm behaviour it compares against (man pages of 22.05).
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN, Commands, wait_for


@pytest.fixture
def two(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Commands:
    c = cluster_factory(nodes=2, gpus_per_node=4, isolation="auto")
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


def shell(c: Commands, script: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """A shell pipeline with our commands first on PATH, as a user's script runs them."""
    env = {**c.env, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run(
        ["/bin/sh", "-c", script],
        cwd=c.cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


# ------------------------------------------------------------------ srun streams


def test_srun_loses_no_output_when_the_reader_is_slow_and_a_child_holds_the_pipe(
    two: Commands,
) -> None:
    # the task ends long before srun reads (its stdout stalls 4 s), and a background
    # child keeps the pipe open: every line the task wrote still arrives
    out = shell(
        two,
        "srun -n1 sh -c 'sleep 8 & yes 0123456789abcdef | head -n 2000000; echo END' "
        "| (sleep 4; awk 'END { print NR, $0 }')",
    )
    assert out.returncode == 0, out.stderr
    count, last = out.stdout.split()
    assert (int(count), last) == (2000001, "END")


def test_srun_multi_task_runs_never_fail_after_success(two: Commands) -> None:
    # a late write meeting a finished stream used to surface as a raw gRPC INTERNAL
    # error with exit 1 after every task succeeded
    for _ in range(15):
        out = two("srun", "-n3", "-N2", "true", check=False)
        assert out.returncode == 0 and out.stderr == "", out.stderr


def wait_done(c: Commands, job_id: str) -> str:
    c.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", timeout=60)
    return (c.cwd / f"slurm-{job_id}.out").read_text()


def test_launch_recipe_master_from_scontrol_hostnames_is_kept_by_srun(two: Commands) -> None:
    # the multi-node recipe: MASTER_ADDR from `scontrol show hostnames`, MASTER_PORT
    # from the job id; srun must not replace what the script exported
    (two.cwd / "recipe.sh").write_text(
        """#!/bin/sh
#SBATCH -N2 --ntasks-per-node=1
export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
echo "nodes $(scontrol show hostnames | tr '\\n' ' ')"
srun sh -c 'echo "task $RANK/$WORLD_SIZE $MASTER_ADDR:$MASTER_PORT"'
"""
    )
    job_id = two("sbatch", "recipe.sh").stdout.split()[-1]
    text = wait_done(two, job_id).splitlines()
    assert "nodes node01 node02 " in text
    port = 20000 + int(job_id) % 10000
    assert sorted(x for x in text if x.startswith("task")) == [
        f"task 0/2 node01:{port}",
        f"task 1/2 node01:{port}",
    ]


def test_sbatch_wait_returns_when_the_job_ends_with_its_exit_code(two: Commands) -> None:
    # Slurm: "Do not exit until the submitted job terminates. The exit code of the
    # sbatch command will be the same as the exit code of the submitted job."
    out = shell(two, "sbatch --wait --wrap 'sleep 1; exit 3'; echo rc=$?; squeue -h -o %i | wc -l")
    lines = out.stdout.split("\n")
    assert lines[0].startswith("Submitted batch job ") and lines[1] == "rc=3", out.stderr
    assert lines[2].strip() == "0"  # the job had ended when sbatch returned
    ok = shell(two, "sbatch -W --parsable --array=0-2 --wrap true && echo next")
    assert ok.stdout.split() == [ok.stdout.split()[0], "next"]


# ------------------------------------------------------------------ signals

STEP_TRAPS_USR1 = """#!/bin/sh
#SBATCH -t 1 {extra}
srun sh -c 'trap "echo step-got-usr1; exit 0" USR1; echo ready; while :; do sleep 0.1; done'
echo shell-survived
"""


def test_scancel_signal_reaches_the_steps_not_the_batch_shell(two: Commands) -> None:
    # scancel(1) 22.05: "By default, signals other than SIGKILL are not sent to the
    # batch step (the shell script)"; a script that traps USR1 in its step checkpoints
    (two.cwd / "trap.sh").write_text(STEP_TRAPS_USR1.format(extra=""))
    job_id = two("sbatch", "trap.sh").stdout.split()[-1]
    out = two.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "ready" in out.read_text(), 30, "the step to start")
    two("scancel", "-s", "USR1", job_id)
    assert wait_done(two, job_id).splitlines()[-2:] == ["step-got-usr1", "shell-survived"]
    assert two.job(job_id)["state"] == "JOB_STATE_COMPLETED"


def test_signal_option_without_b_reaches_the_steps_before_the_limit(two: Commands) -> None:
    # sbatch(1): "By default all job steps will be signaled, but not the batch shell
    # itself" (submitit's --signal=USR2@90 is handled in its srun step)
    (two.cwd / "warn.sh").write_text(STEP_TRAPS_USR1.format(extra="--signal=USR1@58"))
    job_id = two("sbatch", "warn.sh").stdout.split()[-1]
    assert wait_done(two, job_id).splitlines()[-2:] == ["step-got-usr1", "shell-survived"]
    assert two.job(job_id)["state"] == "JOB_STATE_COMPLETED"


COUNT_USR1 = """import os, signal, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: (got.append(s), print("got usr1", flush=True)))
print("ready", flush=True)
while not os.path.exists("stop"):
    time.sleep(0.05)
print("usr1 x", len(got), flush=True)
"""


def test_each_step_task_gets_the_signal_once(two: Commands) -> None:
    # Slurm signals each process of a step once: a task that checkpoints on every
    # SIGUSR1 (submitit does on USR2) must not see two
    import sys

    (two.cwd / "count.py").write_text(COUNT_USR1)
    job_id = two(
        "sbatch",
        "--parsable",
        "-t",
        "1",
        "--signal=USR1@58",
        "--wrap",
        f"srun {sys.executable} count.py",
    ).stdout.strip()
    out = two.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "got usr1" in out.read_text(), 30, "the warning")
    (two.cwd / "stop").touch()
    two.wait_state(job_id, "COMPLETED")
    assert out.read_text() == "ready\ngot usr1\nusr1 x 1\n"


def test_scancel_full_reaches_the_shell_and_batch_without_signal_kills_it(
    two: Commands,
) -> None:
    script = """#!/bin/sh
trap 'echo shell-got-usr1' USR1
srun sh -c 'trap "echo step-got-usr1; exit 0" USR1; echo ready; while :; do sleep 0.1; done'
echo after-step
"""
    (two.cwd / "full.sh").write_text(script)
    job_id = two("sbatch", "full.sh").stdout.split()[-1]
    out = two.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "ready" in out.read_text(), 30, "the step to start")
    two("scancel", "--full", "-s", "USR1", job_id)
    lines = wait_done(two, job_id).splitlines()
    assert {"step-got-usr1", "shell-got-usr1", "after-step"} <= set(lines)
    # -b with no -s: SIGKILL; a pending job is cancelled as by a plain scancel
    held = two("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    two("scancel", "-b", held)
    assert two.wait_state(held, "CANCELLED")["state"] == "JOB_STATE_CANCELLED"
    # a running one: the shell is killed, the job ends FAILED 0:9 (as a real 22.05's)
    running = two("sbatch", "--parsable", "--wrap", "echo up; sleep 60").stdout.strip()
    out = two.cwd / f"slurm-{running}.out"
    wait_for(lambda: out.exists() and "up" in out.read_text(), 30, "the job to start")
    two("scancel", "-b", running)
    two.wait_state(running, "FAILED")
    rows = two("sacct", "-X", "-n", "-P", "-o", "State,ExitCode", "-j", running).stdout
    assert rows == "FAILED|0:9\n"


def test_a_job_that_requeues_itself_sees_scontrol_succeed(two: Commands) -> None:
    # submitit's timeout path: its step runs `scontrol requeue $SLURM_JOB_ID` and checks
    # the exit code; the TERM that the requeue sends the job must not kill the command
    (two.cwd / "self.sh").write_text(
        """#!/bin/sh
trap 'echo shell-got-term' TERM
if [ "$SLURM_RESTART_COUNT" = 0 ]; then
  srun sh -c 'trap "echo step-got-term" TERM; scontrol requeue $SLURM_JOB_ID
    echo "requeue rc=$?"; sleep 30'
else
  echo "back after $SLURM_RESTART_COUNT"
fi
"""
    )
    job_id = two("sbatch", "--parsable", "self.sh").stdout.strip()
    out = two.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "back after 1" in out.read_text(), 90, "the requeued run")
    two.wait_state(job_id, "COMPLETED")
    assert "requeue rc=0" in out.read_text().splitlines(), out.read_text()


# ------------------------------------------------------------------ nodes reach the host


def host_addresses() -> list[str]:
    """The submitting host as a job would name it: its hostname and its outward address."""
    import socket

    names = [socket.gethostname()]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is chosen
            names.append(probe.getsockname()[0])
        except OSError:
            pass
    return names


def test_jobs_on_fake_nodes_reach_a_service_on_the_submitting_host(two: Commands) -> None:
    # on a real cluster compute nodes reach the login node (dask-jobqueue's workers
    # connect back to the scheduler its client started there): so must fake ones
    import socket
    import threading

    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    got: list[bytes] = []

    def serve() -> None:
        server.settimeout(60)
        for _ in host_addresses():
            conn, _ = server.accept()
            with conn:
                got.append(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        (two.cwd / "connect.py").write_text(
            "import os, socket, sys\n"
            "for host in sys.argv[1:]:\n"
            f"    s = socket.create_connection((host, {port}), 10)\n"
            "    s.sendall(f'hello from {os.environ[\"SLURMD_NODENAME\"]} via {host}'.encode())\n"
            "    s.close()\n"
        )
        hosts = " ".join(host_addresses())
        job_id = two(
            "sbatch", "-w", "node02", "--wrap", f"python3 connect.py {hosts}"
        ).stdout.split()[-1]
        state = two.wait_state(job_id, "COMPLETED", "FAILED", timeout=60)["state"]
        assert state == "JOB_STATE_COMPLETED", (two.cwd / f"slurm-{job_id}.out").read_text()
        thread.join(10)
        assert sorted(got) == sorted(
            f"hello from node02 via {h}".encode() for h in host_addresses()
        )
    finally:
        server.close()


# ------------------------------------------------------------------ sacct


def test_sacct_array_steps_carry_the_tasks_id_and_the_array_id_lists_every_task(
    two: Commands,
) -> None:
    # Slurm: steps of task 1 of array 11 are 11_1.batch, 11_1.0 (JobIDRaw: the task's
    # own id); `sacct -j 11` lists every task, `sacct -j 11_1` that task only
    array = two("sbatch", "--parsable", "--array=0-2", "--wrap", "srun true").stdout.strip()
    for task in range(3):
        two.wait_state(int(array) + task, "COMPLETED")
    rows = two("sacct", "-P", "-n", "-o", "JobID,JobIDRaw", "-j", array).stdout.split()
    a = int(array)
    assert rows == [
        f"{array}_{t}{suffix}|{a + t}{suffix}" for t in range(3) for suffix in ("", ".batch", ".0")
    ]
    one = two("sacct", "-P", "-n", "-o", "JobID", "-j", f"{array}_1").stdout.split()
    assert one == [f"{array}_1", f"{array}_1.batch", f"{array}_1.0"]


def test_option_and_time_errors_exit_255_for_sbatch_srun_salloc(two: Commands) -> None:
    # Slurm's sbatch/srun/salloc exit(-1) on a bad option or time format
    for argv in (
        ["sbatch", "--time=soon", "--wrap", "true"],
        ["sbatch", "--no-such-flag", "--wrap", "true"],
        ["srun", "-t", "1:2:3:4", "true"],
        ["srun", "--bogus", "true"],
        ["srun", "-N", "lots", "true"],
        ["salloc", "--time=later", "true"],
        ["salloc", "--bogus", "true"],
    ):
        proc = two(*argv, check=False)
        assert proc.returncode == 255, (argv, proc.returncode, proc.stderr)
        # getopt's own messages carry no "error: " (a real 22.05: `sbatch: unrecognized
        # option '--no-such-flag'`); the command's own do
        getopt = any(a.startswith("--bogus") or a == "--no-such-flag" for a in argv)
        prefix = f"{argv[0]}: " if getopt else f"{argv[0]}: error: "
        assert proc.stderr.startswith(prefix), proc.stderr
        assert "error: unrecognized" not in proc.stderr, proc.stderr
        if any("time" in a or a == "-t" for a in argv):  # Slurm's words for a bad --time
            assert "error: Invalid --time specification" in proc.stderr, proc.stderr
    assert two.cluster.client().get_jobs({}).get("jobs", []) == []  # nothing was submitted


def test_time_limit_and_cancel_leave_slurmstepds_line_and_timeout_shows_0_0(
    two: Commands,
) -> None:
    import re

    late = two("sbatch", "--parsable", "-t", "0:02", "--wrap", "echo up; sleep 60").stdout
    late = late.strip()
    two.wait_state(late, "TIMEOUT", timeout=60)
    last = (two.cwd / f"slurm-{late}.out").read_text().splitlines()[-1]
    assert re.fullmatch(
        rf"slurmstepd-(node0[12]): error: \*\*\* JOB {late} ON \1 CANCELLED AT "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d DUE TO TIME LIMIT \*\*\*",
        last,
    ), last
    rows = two("sacct", "-P", "-n", "-o", "JobID,State,ExitCode", "-j", late).stdout.split()
    assert rows[:2] == [f"{late}|TIMEOUT|0:0", f"{late}.batch|CANCELLED|0:15"]

    gone = two("sbatch", "--parsable", "--wrap", "echo up; sleep 60").stdout.strip()
    out = two.cwd / f"slurm-{gone}.out"
    wait_for(lambda: out.exists() and "up" in out.read_text(), 30, "the job to start")
    two("scancel", gone)
    two.wait_state(gone, "CANCELLED")
    assert re.fullmatch(
        rf"slurmstepd-(node0[12]): error: \*\*\* JOB {gone} ON \1 CANCELLED AT \S+ \*\*\*",
        out.read_text().splitlines()[-1],
    )

    # a working directory the node lacks: the job runs in /tmp, and says so as 22.05 does
    lost = two(
        "sbatch",
        "--parsable",
        "-D",
        "/nonexistent-dir",
        "-o",
        f"{two.cwd}/lost.out",
        "--wrap",
        "pwd",
    ).stdout.strip()
    two.wait_state(lost, "COMPLETED")
    assert re.fullmatch(
        r"slurmstepd-node0[12]: error: couldn't chdir to `/nonexistent-dir': No such file or "
        r"directory: going to /tmp instead\n/tmp\n",
        (two.cwd / "lost.out").read_text(),
    )


# ------------------------------------------------------------------ batch environment


def test_batch_environment_has_slurms_variables(two: Commands) -> None:
    # sbatch(1) OUTPUT ENVIRONMENT VARIABLES: SLURM_SUBMIT_DIR is where sbatch ran
    # (even with -D), SLURM_JOB_QOS, SLURM_JOB_ACCOUNT, SLURM_GPUS for --gpus
    run = two.cwd / "rundir"
    run.mkdir()
    job_id = two(
        "sbatch",
        "--parsable",
        "-D",
        "rundir",
        "-A",
        "vision",
        "--gpus=2",
        "--wrap",
        "echo $SLURM_SUBMIT_DIR $PWD $SLURM_JOB_QOS $SLURM_JOB_ACCOUNT $SLURM_GPUS",
    ).stdout.strip()
    two.wait_state(job_id, "COMPLETED", "FAILED")
    line = (run / f"slurm-{job_id}.out").read_text().split()
    assert line == [str(two.cwd), str(run), "normal", "vision", "2"], line
    # --export=NONE: the login basics, nothing of the submitting shell
    job_id = two(
        "sbatch",
        "--parsable",
        "--export=NONE",
        "--wrap",
        'echo "home=$HOME user=$USER path=${PATH:+set} secret=${SECRET:-unset}"',
        env={"SECRET": "s3"},
    ).stdout.strip()
    two.wait_state(job_id, "COMPLETED", "FAILED")
    text = (two.cwd / f"slurm-{job_id}.out").read_text().strip()
    assert text.startswith("home=/") and " path=set secret=unset" in text, text


def test_default_account_and_qos_reach_the_batch_environment(two: Commands) -> None:
    # sbatch(1): SLURM_JOB_ACCOUNT / SLURM_JOB_QOS are the job's account and QOS, which
    # without -A/-q are the user's DefaultAccount and the association's DefaultQOS
    two("sacctmgr", "-i", "add", "qos", "high", "Priority=10")
    two("sacctmgr", "-i", "add", "account", "vision")
    two("sacctmgr", "-i", "add", "user", "root", "Account=vision", "DefaultAccount=vision")
    two("sacctmgr", "-i", "modify", "user", "root", "set", "QOS=normal,high", "DefaultQOS=high")
    job_id = two(
        "sbatch", "--parsable", "--wrap", "echo $SLURM_JOB_ACCOUNT $SLURM_JOB_QOS"
    ).stdout.strip()
    two.wait_state(job_id, "COMPLETED")
    assert (two.cwd / f"slurm-{job_id}.out").read_text() == "vision high\n"
    assert two("squeue", "-h", "-t", "all", "-o", "%a %q", "-j", job_id).stdout == "vision high\n"


def test_pending_on_drained_nodes_shows_slurms_reasons(two: Commands) -> None:
    # Slurm 22.05 (checked on a real one): a job that names drained nodes (-w) waits
    # with "ReqNodeNotAvail, UnavailableNodes:NODES"; one that names none, with too few
    # nodes up, with "Nodes required for job are DOWN, DRAINED or reserved for jobs in
    # higher priority partitions"; never Resources
    two("scontrol", "update", "NodeName=node[01-02]", "State=DRAIN", "Reason=maintenance")
    named = two("sbatch", "--parsable", "-w", "node[01-02]", "--wrap", "true").stdout.strip()
    job_id = two("sbatch", "--parsable", "-N2", "--wrap", "true").stdout.strip()
    unavailable = "ReqNodeNotAvail, UnavailableNodes:node[01-02]"
    down = (
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
        "partitions"
    )
    wait_for(lambda: two.job(named).get("reason") == unavailable, 30, "the -w job's reason")
    wait_for(lambda: two.job(job_id).get("reason") == down, 30, "the other job's reason")
    rows = two("squeue", "-h", "-S", "i", "-o", "%R", "-j", f"{named},{job_id}").stdout
    assert rows.splitlines() == [f"({unavailable})", f"({down})"]
    shown = two("scontrol", "show", "job", job_id).stdout
    assert "Reason=Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in" in shown
    why = two("corral", "why", named).stdout
    assert "node[01-02] down or drained" in why and unavailable in why
    why = two("corral", "why", job_id).stdout
    assert "the others are down or drained" in why and down in why
    two("scontrol", "update", "NodeName=node[01-02]", "State=RESUME")
    two.wait_state(job_id, "COMPLETED")
    two.wait_state(named, "COMPLETED")


# ------------------------------------------------------------------ squeue -O, scontrol update


def test_squeue_long_format_fields_with_widths(two: Commands) -> None:
    # squeue(1) -O "type[:[.][size][suffix]]": SIZE wide (default 20), '.' right-justifies
    job_id = two("sbatch", "--parsable", "-H", "-J", "fmtjob", "--wrap", "true").stdout.strip()
    out = two("squeue", "-O", "JobID:8,Name:.10,State:10|,UserName", "-j", job_id).stdout
    header, row = out.splitlines()
    assert header == f"{'JOBID':<8}{'NAME':>10}{'STATE':<10}|{'USER':<20}"
    import getpass

    assert row == f"{job_id:<8}{'fmtjob':>10}{'PENDING':<10}|{getpass.getuser():<20}"
    # Slurm 22.05 reports an unknown field, leaves it out and exits 0
    part = two("squeue", "--Format=JobID:8,NoSuchField", "-j", job_id, check=False)
    assert part.returncode == 0 and "Invalid job format specification: NoSuchField" in part.stderr
    assert part.stdout.splitlines() == [f"{'JOBID':<8}", f"{job_id:<8}"]
    bad = two("squeue", "--Format=NoSuchField", check=False)
    assert bad.returncode == 1 and "Invalid job format specification: NoSuchField" in bad.stderr


def test_limits_show_in_whole_minutes_and_gpus_as_2205_tres(two: Commands) -> None:
    # Slurm 22.05 (checked on a real one): `-t 0` is UNLIMITED, `-t 0:30` shows as 1:00
    # (squeue), 00:01:00 (scontrol, sacct); %b and -O tres-per-node print gres:gpu:N,
    # tres-per-job the --gpus count; -O names are matched without case
    short = two("sbatch", "--parsable", "-H", "-t", "0:30", "--gres=gpu:2", "--wrap", "true")
    endless = two("sbatch", "--parsable", "-H", "-t", "0", "--gpus=3", "--wrap", "true")
    ids = f"{short.stdout.strip()},{endless.stdout.strip()}"
    rows = two("squeue", "-h", "-S", "i", "-o", "%l|%b", "-j", ids).stdout.split()
    assert rows == ["1:00|gres:gpu:2", "UNLIMITED|N/A"]
    out = two(
        "squeue", "-S", "i", "-O", "TimeLimit:10,tres-per-node:14,TRES-PER-JOB:12", "-j", ids
    ).stdout.splitlines()
    assert out == [
        f"{'TIME_LIMIT':<10}{'TRES_PER_NODE':<14}{'TRES_PER_JOB':<12}",
        f"{'1:00':<10}{'gres:gpu:2':<14}{'N/A':<12}",
        f"{'UNLIMITED':<10}{'N/A':<14}{'gres:gpu:3':<12}",
    ]
    shown = two("scontrol", "show", "job", short.stdout.strip()).stdout
    assert "TimeLimit=00:01:00 " in shown and "TresPerNode=gres:gpu:2" in shown
    two("scancel", short.stdout.strip(), endless.stdout.strip())
    limits = two("sacct", "-X", "-n", "-P", "-o", "Timelimit", "-j", ids).stdout.split()
    assert limits == ["00:01:00", "UNLIMITED"]


def test_scontrol_update_job_name_pending_and_running(two: Commands) -> None:
    # scontrol(1): JobName=<name> (or Name=) may be changed, pending or running
    held = two("sbatch", "--parsable", "-H", "-J", "old", "--wrap", "true").stdout.strip()
    two("scontrol", "update", f"JobId={held}", "Name=renamed")
    assert two("squeue", "-h", "-o", "%j", "-j", held).stdout.strip() == "renamed"
    running = two("sbatch", "--parsable", "--wrap", "sleep 30").stdout.strip()
    two.wait_state(running, "RUNNING")
    two("scontrol", "update", "job", running, "JobName=later")
    assert "JobName=later" in two("scontrol", "show", "job", running).stdout
    two("scancel", held, running)
    two.wait_state(running, "CANCELLED")
    names = two("sacct", "-X", "-n", "-P", "-o", "JobName", "-j", f"{held},{running}").stdout
    assert names.split() == ["renamed", "later"]


# ------------------------------------------------------------------ srun --pty


def test_srun_pty_bash_is_a_real_terminal(two: Commands) -> None:
    # srun(1) --pty: task zero in pseudo terminal mode; researchers run `srun --pty bash`
    # for interactive sessions: job control, window size, Ctrl-C to the task
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    proc = subprocess.Popen(
        [str(BIN / "srun"), "--pty", "bash", "--norc", "--noprofile", "-i"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=two.cwd,
        env={**two.env, "PS1": "prompt> ", "TERM": "xterm"},
        start_new_session=True,
    )
    os.close(slave)
    seen = b""

    def expect(pattern: str, timeout: float = 30) -> str:
        import re

        nonlocal seen
        deadline = time.monotonic() + timeout
        while not re.search(pattern.encode(), seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {seen.decode(errors='replace')!r}"
            if select.select([master], [], [], left)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        found = seen.decode(errors="replace")
        seen = b""
        return found

    try:
        expect("prompt> ")
        os.write(master, b"tty; echo flags=$-; stty size\r")
        out = expect(r"\d+ \d+\r\n.*prompt> ")
        assert "/dev/pts/" in out and "not a tty" not in out, out
        import re

        flags = re.findall(r"flags=(\w+)", out)[-1]  # the echo's output, not the typed line
        assert "m" in flags and "i" in flags, out  # job control is on
        assert "33 101" in out, out
        os.write(master, b"sleep 313\r")
        expect("sleep 313")

        def sleeping() -> bool:  # Ctrl-C before sleep runs would reach bash itself
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        if fh.read() == b"sleep\x00313\x00":
                            return True
                except OSError:
                    continue
            return False

        wait_for(sleeping, 20, "sleep to run")
        os.write(master, b"\x03")  # Ctrl-C: a byte to the terminal, SIGINT to sleep
        expect("prompt> ", timeout=20)  # sleep died: the shell is back
        os.write(master, b"echo status=$?\r")
        assert "status=130" in expect(r"status=\d+\r\n", timeout=20)
        os.write(master, b"exit 0\r")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_sbatch_test_only_estimates_and_submits_nothing(two: Commands) -> None:
    # sbatch(1) --test-only: "return an estimate of when a job would be scheduled to
    # run ... No job is actually submitted"; Slurm prints the start, CPUs, nodes and
    # partition on stderr
    import re

    before = two.cluster.client().get_cluster_info({})["nextJobId"]
    out = two("sbatch", "--test-only", "-N2", "-c", "2", "--wrap", "true")
    assert out.stdout == ""
    assert re.fullmatch(
        rf"sbatch: Job {before} to start at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d using 4 "
        r"processors on nodes node\[01-02\] in partition debug\n",
        out.stderr,
    ), out.stderr
    assert two.cluster.client().get_cluster_info({})["nextJobId"] == before
    assert two.cluster.client().get_jobs({}).get("jobs", []) == []
    bad = two("sbatch", "--test-only", "-p", "nosuch", "--wrap", "true", check=False)
    assert bad.returncode == 1 and "Invalid partition name specified" in bad.stderr
