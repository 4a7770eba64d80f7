"""noded for real: users, limits, signals, descendants, GPUs, health, prolog/epilog.

Every test drives the real daemons. Tests that need root (other users, cgroups)
skip without it; CI runs as root. Memory and kill tests run twice: in a cgroup
where the host allows one, and with psutil monitoring only (noded.cgroups = none).
"""

from __future__ import annotations

import grp
import json
import os
import pathlib
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from corral.errors import PermissionDenied
from corral.identity import Identity
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, pid_alive, wait_for
from tests.integration.realusers import kill_processes_of

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
PY = sys.executable


def _cgroups_usable() -> bool:
    return os.geteuid() == 0 and (
        os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        or os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    )


CONTAINMENT = [
    pytest.param(
        "auto",
        id="cgroup",
        marks=pytest.mark.skipif(not _cgroups_usable(), reason="no usable cgroups"),
    ),
    pytest.param("none", id="psutil"),
]


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Any:
    """One-node clusters (by default) and Commands in a work dir of their own."""

    def make(**kw: Any) -> tuple[LocalCluster, Commands]:
        kw.setdefault("nodes", 1)
        kw.setdefault("gpus_per_node", 4)
        kw.setdefault("sample_interval_s", 0.2)
        c = cluster_factory(**kw)
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return c, Commands(c, work)

    return make


def job_id_of(out: subprocess.CompletedProcess[str]) -> str:
    return out.stdout.strip().split()[-1].split(";")[0]


# ---------------------------------------------------------------- users


@pytest.fixture
def throwaway_user() -> Iterator[pwd.struct_passwd]:
    """A real user with a supplementary group, removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd")
    tag = secrets.token_hex(3)
    group, user = f"crlg{tag}", f"crlu{tag}"
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(
            ["useradd", "-M", "-d", f"/nonexistent-{user}", "-s", "/bin/sh", "-G", group, user],
            check=True,
        )
        try:
            yield pwd.getpwnam(user)
        finally:
            kill_processes_of(user)
            subprocess.run(["userdel", user], check=False)
    finally:
        subprocess.run(["groupdel", group], check=False)


def submit_as(cluster: LocalCluster, who: Identity, script: str, work: str, **spec: Any) -> str:
    client = cluster.tcp_client(token=cluster.token(who.user))  # authenticated as that user
    reply = client.submit_job(
        {
            "spec": {
                "script": script,
                "workDir": work,
                "name": "asuser",
                "export": spec.pop("export", "ALL"),
                "environment": spec.pop("environment", {"PATH": "/usr/bin:/bin"}),
                **spec,
            }
        },
    )
    return str(reply["jobId"])


@needs_root
def test_job_runs_as_its_user_with_groups_and_owns_its_output(
    make_cluster: Any, throwaway_user: pwd.struct_passwd
) -> None:
    cluster, cmd = make_cluster(gpus_per_node=0)
    pw = throwaway_user
    work = tempfile.mkdtemp(prefix="corral-user-")
    try:
        os.chown(work, pw.pw_uid, pw.pw_gid)
        who = Identity(pw.pw_name, pw.pw_uid, pw.pw_gid)
        script = (
            "#!/bin/sh\n"
            'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"\n'
            'echo "home=$HOME user=$USER path=$PATH keep=$KEEP"\n'
            "touch made-by-job\n"
        )
        job_id = submit_as(cluster, who, script, work, export="NONE", environment={"KEEP": "yes"})
        job = cmd.wait_state(job_id, "COMPLETED", "FAILED")
        assert job["state"] == "JOB_STATE_COMPLETED", (job.get("reason"), job.get("exitCode"))
        out = pathlib.Path(work, f"slurm-{job_id}.out")
        text = out.read_text()
        extra = grp.getgrnam(f"crlg{pw.pw_name[4:]}").gr_gid
        assert f"uid={pw.pw_uid} gid={pw.pw_gid} " in text
        assert str(extra) in text.split("groups=")[1].split()
        # --export=NONE: the user's login basics, not the submitter's environment
        assert f"home={pw.pw_dir} user={pw.pw_name} path=/usr/local/bin:/usr/bin:/bin" in text
        assert "keep=yes" in text
        assert out.stat().st_uid == pw.pw_uid
        assert pathlib.Path(work, "made-by-job").stat().st_uid == pw.pw_uid
    finally:
        shutil.rmtree(work, ignore_errors=True)


@needs_root
def test_output_where_the_user_may_not_write_fails_the_job(
    make_cluster: Any, throwaway_user: pwd.struct_passwd
) -> None:
    cluster, cmd = make_cluster(gpus_per_node=0)
    pw = throwaway_user
    work = tempfile.mkdtemp(prefix="corral-user-")  # root's, mode 0700: not the user's
    try:
        who = Identity(pw.pw_name, pw.pw_uid, pw.pw_gid)
        job_id = submit_as(cluster, who, "#!/bin/sh\necho hi\n", work)
        job = cmd.wait_state(job_id, "FAILED")
        assert "cannot set up the job's files" in job["reason"]
        assert not os.listdir(work)  # root created nothing on the user's behalf
    finally:
        shutil.rmtree(work, ignore_errors=True)


@needs_root
def test_job_of_a_user_unknown_to_the_user_database_is_refused(make_cluster: Any) -> None:
    cluster, _cmd = make_cluster(gpus_per_node=0)
    ghost = Identity("ghost-" + secrets.token_hex(3), 0, 0)
    with pytest.raises(PermissionDenied, match="is not a known user"):
        submit_as(cluster, ghost, "#!/bin/sh\ntouch /tmp/ghost-ran\n", "/tmp")
    assert not os.path.exists("/tmp/ghost-ran")


# ---------------------------------------------------------------- limits


@pytest.mark.parametrize("cgroups", CONTAINMENT)
def test_memory_over_limit_ends_out_of_memory(make_cluster: Any, cgroups: str) -> None:
    _, cmd = make_cluster(gpus_per_node=0, noded_config=f'cgroups = "{cgroups}"')
    hog = f"{PY} -c 'import time; b = bytearray(400 * 2**20); time.sleep(30)'"
    job_id = job_id_of(cmd("sbatch", "--mem=64M", "--wrap", hog))
    job = cmd.wait_state(job_id, "OUT_OF_MEMORY", timeout=30)
    assert job["reason"] == "OutOfMemory"
    sacct = cmd("sacct", "-j", job_id, "-n", "-X", "-P", "-o", "State").stdout
    assert "OUT_OF_MEMORY" in sacct


DAEMONIZING = """#!/bin/sh
# a grandchild that double-forks into its own session, like a daemon
(setsid sh -c 'echo $$ > grandchild.pid; exec sleep 300' &)
while [ ! -s grandchild.pid ]; do sleep 0.05; done
echo ready
sleep 300
"""


@pytest.mark.parametrize("cgroups", CONTAINMENT)
def test_scancel_and_timeout_leave_no_daemonized_grandchild(
    make_cluster: Any, cgroups: str
) -> None:
    _, cmd = make_cluster(gpus_per_node=0, noded_config=f'cgroups = "{cgroups}"')
    (cmd.cwd / "daemon.sh").write_text(DAEMONIZING)
    pidfile = cmd.cwd / "grandchild.pid"

    job_id = job_id_of(cmd("sbatch", "daemon.sh"))
    wait_for(
        lambda: (
            (cmd.cwd / f"slurm-{job_id}.out").read_text().strip() == "ready"
            if (cmd.cwd / f"slurm-{job_id}.out").exists()
            else False
        ),
        20,
        "the grandchild",
    )
    grandchild = int(pidfile.read_text())
    assert pid_alive(grandchild)
    cmd("scancel", job_id)
    cmd.wait_state(job_id, "CANCELLED")
    assert not pid_alive(grandchild)  # gone by the time ctld hears the job ended

    pidfile.unlink()
    job_id = job_id_of(cmd("sbatch", "-t", "0:03", "daemon.sh"))
    wait_for(pidfile.exists, 20, "the second grandchild")
    grandchild = int(wait_for(lambda: pidfile.read_text().strip(), 5, "its pid"))
    job = cmd.wait_state(job_id, "TIMEOUT", timeout=30)
    assert job["reason"] == "TimeLimit"
    assert not pid_alive(grandchild)


def test_signal_option_arrives_before_the_time_limit(make_cluster: Any) -> None:
    _, cmd = make_cluster(gpus_per_node=0)
    script = """#!/bin/sh
#SBATCH -t 0:06
#SBATCH --signal=B:USR1@3
start=$(date +%s)
trap 'echo "usr1 after $(( $(date +%s) - start ))s"' USR1
i=0
while [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
"""
    (cmd.cwd / "warn.sh").write_text(script)
    job_id = job_id_of(cmd("sbatch", "warn.sh"))
    cmd.wait_state(job_id, "TIMEOUT", timeout=30)
    text = (cmd.cwd / f"slurm-{job_id}.out").read_text()
    assert "usr1 after" in text, text
    after = int(text.split("usr1 after ")[1].split("s")[0])
    assert 2 <= after <= 4  # 6 s limit, 3 s warning


def test_scancel_full_reaches_all_processes_and_batch_only_the_shell(
    make_cluster: Any,
) -> None:
    _, cmd = make_cluster(gpus_per_node=0)
    script = """#!/bin/sh
sh -c 'trap "echo child USR1" USR1; trap "echo child USR2" USR2; echo child-ready;
       while :; do sleep 0.1; done' &
trap 'echo batch USR1' USR1
trap 'echo batch USR2' USR2
while :; do sleep 0.1; done
"""
    (cmd.cwd / "sig.sh").write_text(script)
    job_id = job_id_of(cmd("sbatch", "sig.sh"))
    out = cmd.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "child-ready" in out.read_text(), 20, "the child")
    cmd("scancel", "--full", "-s", "USR1", job_id)
    wait_for(lambda: {"child USR1", "batch USR1"} <= set(out.read_text().splitlines()), 10, "USR1")
    cmd("scancel", "--batch", "-s", "USR2", job_id)
    wait_for(lambda: "batch USR2" in out.read_text(), 10, "USR2 at the batch shell")
    cmd("scancel", "-f", "-s", "USR1", job_id)  # a fence: once this arrives, USR2 would have
    wait_for(lambda: out.read_text().count("child USR1") == 2, 10, "the second USR1")
    assert "child USR2" not in out.read_text()
    cmd("scancel", job_id)
    cmd.wait_state(job_id, "CANCELLED")


def test_jobs_are_bound_to_their_own_cores(make_cluster: Any) -> None:
    _, cmd = make_cluster(gpus_per_node=0)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    script = (
        "#!/bin/sh\n#SBATCH -c 1\n"
        "grep Cpus_allowed_list /proc/self/status\n"
        "while [ ! -e go ]; do sleep 0.05; done\n"
    )
    (cmd.cwd / "core.sh").write_text(script)
    ids = [job_id_of(cmd("sbatch", "core.sh")) for _ in range(2)]
    for job_id in ids:
        cmd.wait_state(job_id, "RUNNING")
    outs = [cmd.cwd / f"slurm-{i}.out" for i in ids]
    wait_for(lambda: all(o.exists() and o.read_text() for o in outs), 20, "their cores")
    cores = [o.read_text().split()[-1] for o in outs]
    (cmd.cwd / "go").touch()
    assert all(c.isdigit() for c in cores) and cores[0] != cores[1]  # one core each


# ---------------------------------------------------------------- GPUs


def test_two_concurrent_jobs_see_their_own_gpus(make_cluster: Any) -> None:
    _, cmd = make_cluster(gpus_per_node=4)
    script = (
        "#!/bin/sh\n#SBATCH --gres=gpu:2\n"
        'echo "cuda=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_GPUS"\n'
        "while [ ! -e go ]; do sleep 0.05; done\n"
    )
    (cmd.cwd / "gpu.sh").write_text(script)
    ids = [job_id_of(cmd("sbatch", "gpu.sh")) for _ in range(2)]
    jobs = [cmd.wait_state(i, "RUNNING") for i in ids]  # both at once: 2 + 2 GPUs
    (cmd.cwd / "go").touch()
    seen = []
    for job_id, job in zip(ids, jobs, strict=True):
        cmd.wait_state(job_id, "COMPLETED")
        given = ",".join(str(g) for g in job["allocations"][0]["gpuIndices"])
        text = (cmd.cwd / f"slurm-{job_id}.out").read_text()
        assert f"cuda={given} job={given}" in text
        seen.append(set(given.split(",")))
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 4


def fake_gpu_state(cluster: LocalCluster, node: str = "node01") -> pathlib.Path:
    return cluster.state_dir / "spool" / node / "fake-gpus.json"


def write_json(path: pathlib.Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)  # noded never reads half a file


def test_injected_xid_drains_the_node_until_resumed(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(gpus_per_node=4)
    write_json(fake_gpu_state(cluster), {"events": [{"kind": "xid", "gpu": 2, "code": 79}]})
    wait_for(lambda: "GPU 2 XID 79" in cmd("sinfo", "-R", "-h").stdout, 20, "the node to drain")
    line = cmd("sinfo", "-R", "-h", "-o", "%E|%u|%N").stdout.strip()
    assert line == "GPU 2 XID 79|root|node01"
    assert cmd("sinfo", "-h", "-o", "%t", "-n", "node01").stdout.strip() == "drain"
    pending = job_id_of(cmd("sbatch", "--wrap", "true"))
    time.sleep(0)  # the scheduler runs on its own; the drained node must not take the job
    job = cmd.wait_state(pending, "PENDING")
    assert job["state"] == "JOB_STATE_PENDING"

    # a drain survives a ctld restart: it is in the store
    cluster.stop_process("ctld")
    cluster.start_ctld()
    wait_for(
        lambda: cmd("sinfo", "-h", "-o", "%t", "-n", "node01").stdout.strip() == "drain",
        30,
        "node01 back, still drained",
    )
    assert "GPU 2 XID 79" in cmd("sinfo", "-R", "-h").stdout

    cmd("scontrol", "update", "nodename=node01", "state=resume")
    cmd.wait_state(pending, "COMPLETED")
    assert cmd("sinfo", "-R", "-h").stdout.strip() == ""


def test_gpu_use_is_accounted_and_idle_gpus_are_flagged(make_cluster: Any) -> None:
    cluster, cmd = make_cluster(
        gpus_per_node=2,
        extra_config='\n[idle_gpus]\nwindow_s = 1\nthreshold_pct = 10\naction = "flag"\n',
    )
    state = fake_gpu_state(cluster)
    job_id = job_id_of(
        cmd("sbatch", "--gres=gpu:1", "--wrap", "while [ ! -e stop ]; do sleep 0.05; done")
    )
    cmd.wait_state(job_id, "RUNNING")
    wait_for(
        lambda: cmd("squeue", "-h", "-j", job_id, "-o", "%r").stdout.strip() == "IdleGPUs",
        20,
        "the idle flag",
    )
    assert "IdleGPUsSince=" in cmd("scontrol", "show", "job", job_id).stdout
    write_json(state, {"util": {"0": 80, "1": 80}, "memory_used_mb": {"0": 3000, "1": 3000}})
    wait_for(
        lambda: cmd("squeue", "-h", "-j", job_id, "-o", "%r").stdout.strip() == "None",
        20,
        "the flag to clear once the GPU is busy",
    )
    (cmd.cwd / "stop").touch()
    cmd.wait_state(job_id, "COMPLETED")
    row = cmd(
        "sacct", "-j", job_id, "-P", "-n", "-o", "JobID,MaxRSS,TotalCPU,TRESUsageInMax"
    ).stdout.splitlines()
    batch = next(r for r in row if r.startswith(f"{job_id}.batch"))
    assert "gres/gpuutil=80" in batch
    assert "gres/gpumem=3000M" in batch


def test_sacct_reports_max_rss_and_cpu_time(make_cluster: Any) -> None:
    _, cmd = make_cluster(gpus_per_node=0)
    burn = (
        # burn CPU time, not wall time: on a loaded machine 1.5 s of wall time may
        # hold well under a second of CPU
        f"{PY} -c 'import time; b = bytearray(120 * 2**20)\n"
        "while time.process_time() < 1.5: pass\ntime.sleep(1)'"
    )
    job_id = job_id_of(cmd("sbatch", "--wrap", burn))
    cmd.wait_state(job_id, "COMPLETED", timeout=30)
    rows = cmd("sacct", "-j", job_id, "-P", "-n", "-o", "JobID,MaxRSS,TotalCPU").stdout
    batch = next(r for r in rows.splitlines() if r.startswith(f"{job_id}.batch"))
    _, max_rss, total_cpu = batch.split("|")
    assert int(max_rss.rstrip("K")) > 100 * 1024
    minutes, seconds = total_cpu.split(":")
    assert int(minutes) * 60 + float(seconds) >= 1.0


# ---------------------------------------------------------------- prolog and epilog


def test_failing_prolog_drains_and_requeues_epilog_sees_the_job(
    make_cluster: Any, tmp_path: pathlib.Path
) -> None:
    flag = tmp_path / "prolog-fails"
    flag.touch()
    seen = tmp_path / "epilog-saw"
    prolog = tmp_path / "prolog.sh"
    prolog.write_text(f'#!/bin/sh\n[ -e "{flag}" ] && {{ echo "no scratch"; exit 3; }}\nexit 0\n')
    epilog = tmp_path / "epilog.sh"
    epilog.write_text(
        f'#!/bin/sh\necho "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID $SLURM_JOB_USER" >> "{seen}"\n'
    )
    for script in (prolog, epilog):
        script.chmod(0o755)
    _, cmd = make_cluster(gpus_per_node=0, noded_config=f'prolog = "{prolog}"\nepilog = "{epilog}"')
    job_id = job_id_of(cmd("sbatch", "--wrap", "echo ran"))
    wait_for(lambda: "Prolog error" in cmd("sinfo", "-R", "-h").stdout, 20, "the drain")
    job = cmd.wait_state(job_id, "PENDING")
    assert job.get("restartCount") == 1
    flag.unlink()
    cmd("scontrol", "update", "nodename=node01", "state=resume")
    cmd.wait_state(job_id, "COMPLETED")
    user = pwd.getpwuid(os.getuid()).pw_name
    wait_for(seen.exists, 10, "the epilog")
    assert seen.read_text().split() == ["epilog_slurmd", job_id, user]
