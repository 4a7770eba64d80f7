"""noded's small parts: cgroup files, identity rules, --signal syntax, cores, environment."""

from __future__ import annotations

import os
import pathlib
import pwd
import signal

import pytest

from corral.errors import InvalidOption
from corral.jobsyntax import WarnSignal, parse_warn_signal, signal_number
from corral.wire import corral_pb2 as pb
from noded import cgroups, spawn
from noded.env import batch_environment, exports_all
from noded.gpu import GpuSample
from noded.limits import CoreAllocator, GpuStats


def fake_v2(base: pathlib.Path) -> None:
    base.mkdir(exist_ok=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("")


def fake_v1(base: pathlib.Path, controllers: tuple[str, ...] = ("memory", "cpuacct")) -> None:
    for c in controllers:
        (base / c).mkdir(parents=True)
        (base / c / "cgroup.procs").write_text("")
    (base / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")


def test_v2_job_cgroup_files(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_v2(tmp_path)
    manager, why = cgroups.detect("auto", "corral", "n1", base=tmp_path)
    assert manager is not None and manager.version == 2 and why == ""
    assert (tmp_path / "corral" / "n1" / "cgroup.subtree_control").read_text() == (
        "+memory +cpu +pids"
    )
    job = manager.create(42)
    d = tmp_path / "corral" / "n1" / "job_42"
    job.set_memory_limit(64 * 2**20)
    assert (d / "memory.max").read_text() == str(64 * 2**20)
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert job.oom_kills() == 1
    (d / "cpu.stat").write_text("usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n")
    assert job.cpu_seconds() == (2.0, 1.0)
    job.add(4242)
    assert (d / "cgroup.procs").read_text() == "4242"
    assert job.deny_gpus([1, 2]) is False  # v2 needs eBPF: CUDA_VISIBLE_DEVICES only


def test_v1_job_cgroup_files(tmp_path: pathlib.Path) -> None:
    fake_v1(tmp_path, ("memory", "cpuacct", "devices"))
    manager, _ = cgroups.detect("auto", "corral", "n1", base=tmp_path)
    assert manager is not None and manager.version == 1
    assert set(manager.parents) == {"memory", "cpuacct", "devices"}
    job = manager.create(7)
    mem = tmp_path / "memory" / "corral" / "n1" / "job_7"
    job.set_memory_limit(2**20)
    assert (mem / "memory.limit_in_bytes").read_text() == str(2**20)
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert job.oom_kills() == 2
    assert job.deny_gpus([3]) is True
    assert (tmp_path / "devices/corral/n1/job_7/devices.deny").read_text() == "c 195:3 rwm"


def test_detect_says_why_when_it_cannot(tmp_path: pathlib.Path) -> None:
    manager, why = cgroups.detect("auto", "corral", "n1", base=tmp_path)
    assert manager is None
    assert "v2:" in why and "v1:" in why and "psutil monitoring only" in why
    assert cgroups.detect("none", "corral", "n1", base=tmp_path)[0] is None
    fake_v2(tmp_path)
    assert cgroups.detect("v1", "corral", "n1", base=tmp_path)[0] is None


def job(uid: int, user: str) -> pb.Job:
    return pb.Job(job_id=1, uid=uid, user=user, spec=pb.JobSpec(export="ALL"))


def test_non_root_noded_runs_only_its_own_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1234)
    monkeypatch.setattr(os, "getgid", lambda: 1234)
    who = spawn.identity_for(job(1234, "me"), "n1")
    assert who.pw is None and who.uid == 1234
    with pytest.raises(spawn.LaunchError, match="runs as uid 1234 and cannot start jobs of uid 0"):
        spawn.identity_for(job(0, "root"), "n1")


def test_root_noded_refuses_unknown_and_mismatched_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 0)

    def getpwuid(uid: int) -> pwd.struct_passwd:
        if uid == 1000:
            return pwd.struct_passwd(("alice", "x", 1000, 1000, "", "/home/alice", "/bin/sh"))
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    monkeypatch.setattr(os, "getgrouplist", lambda name, gid: [gid, 27])
    who = spawn.identity_for(job(1000, "alice"), "n1")
    assert (who.uid, who.gid, who.groups) == (1000, 1000, [1000, 27])
    with pytest.raises(spawn.LaunchError, match="user bob \\(uid 1001\\) is unknown on node n1"):
        spawn.identity_for(job(1001, "bob"), "n1")
    with pytest.raises(spawn.LaunchError, match="uid 1000 is alice on node n1, not mallory"):
        spawn.identity_for(job(1000, "mallory"), "n1")


def test_warn_signal_syntax() -> None:
    assert parse_warn_signal("USR1") == WarnSignal(signal.SIGUSR1, 60, False)
    assert parse_warn_signal("B:SIGUSR2@90") == WarnSignal(signal.SIGUSR2, 90, True)
    assert parse_warn_signal("R:10@5") == WarnSignal(10, 5, False)
    assert signal_number("term") == signal.SIGTERM
    for bad in ("", "B:", "X:USR1", "USR1@", "USR1@-3", "NOPE", "99", "USR1@70000"):
        with pytest.raises(InvalidOption):
            parse_warn_signal(bad)


def test_cores_are_shared_least_loaded_first() -> None:
    cores = CoreAllocator([0, 1, 2, 3])
    assert cores.take(1, 2) == [0, 1]
    assert cores.take(2, 3) == [0, 2, 3]  # the two idle cores, then the least used
    cores.release(1)
    cores.release(2)
    assert cores.load == {0: 0, 1: 0, 2: 0, 3: 0}
    assert cores.take(3, 64) == [0, 1, 2, 3]  # a fake node bigger than the host


def test_gpu_stats_peak_and_mean() -> None:
    stats = GpuStats()
    stats.add([GpuSample(0, 10.0, 100.0), GpuSample(1, 90.0, 300.0)])
    assert (stats.util_max, stats.util_mean, stats.mem_max_mb, stats.mem_mean_mb) == (
        90.0,
        50.0,
        300.0,
        200.0,
    )


def test_export_none_gives_login_basics_not_the_submitters_environment() -> None:
    me = pwd.getpwuid(os.getuid())
    j = pb.Job(
        job_id=3,
        user=me.pw_name,
        uid=me.pw_uid,
        spec=pb.JobSpec(export="NONE,KEEP=1", environment={"KEEP": "1"}),
    )
    env = batch_environment(j, "n1", "c", pw=me, default_path="/bin")
    assert env["HOME"] == me.pw_dir and env["PATH"] == "/bin" and env["KEEP"] == "1"
    assert exports_all("ALL,X=1") and exports_all("") and not exports_all("X,Y")
    j.spec.export = "ALL"
    j.spec.environment["PATH"] = "/mine"
    assert batch_environment(j, "n1", "c", pw=me)["PATH"] == "/mine"


def test_signals_go_out_with_the_job_frozen_and_thawed_after(tmp_path: pathlib.Path) -> None:
    fake_v1(tmp_path, ("memory", "freezer"))
    manager, _ = cgroups.detect("v1", "corral", "n1", base=tmp_path)
    assert manager is not None
    job = manager.create(9)
    state = tmp_path / "freezer" / "corral" / "n1" / "job_9" / "freezer.state"
    state.write_text("THAWED\n")
    seen: list[str] = []
    with job.frozen():
        seen.append(state.read_text())
    assert seen == ["FROZEN"] and state.read_text() == "THAWED"


@pytest.mark.skipif(
    os.geteuid() != 0 or not pathlib.Path("/sys/fs/cgroup/freezer/cgroup.procs").exists(),
    reason="needs root and the v1 freezer (cgroup v2 hosts: cgroup.freeze, same code)",
)
def test_a_real_frozen_job_makes_no_progress_and_dies_of_the_signal_on_thaw(
    tmp_path: pathlib.Path,
) -> None:
    import subprocess
    import time

    from corral.testing.harness import wait_for

    manager, _ = cgroups.detect("v1", f"corral-test-{os.getpid()}", "n1")
    assert manager is not None and "freezer" in manager.parents
    job = manager.create(1)
    ticks = tmp_path / "ticks"
    counter = subprocess.Popen(
        ["sh", "-c", f'while :; do echo x >> "{ticks}"; sleep 0.01; done'],
        stdout=subprocess.DEVNULL,
    )
    try:
        job.add(counter.pid)
        wait_for(lambda: ticks.exists() and ticks.stat().st_size > 0, 10, "the counter to tick")
        with job.frozen():
            frozen_at = ticks.stat().st_size
            time.sleep(0.1)  # the behaviour under test is "nothing moves for a while"
            assert ticks.stat().st_size == frozen_at
            os.kill(counter.pid, signal.SIGTERM)
            assert counter.poll() is None  # queued, not delivered, while frozen
        assert counter.wait(timeout=10) == -signal.SIGTERM
    finally:
        counter.kill()
        counter.wait()
        wait_for(job.try_remove, 10, "the cgroup to go")
        manager.close()


def test_a_step_signal_reaches_each_task_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the tracker finds the task by its marker and the task list holds it as a root:
    # one kill for it, not two (Slurm signals each process of a step once; a task that
    # checkpoints on each SIGUSR1 would checkpoint twice)
    import subprocess
    import types

    from noded.steps import RunningStep
    from noded.tracking import STEP_MARKER_VAR, JobProcesses

    marker = f"test:{os.getpid()}:1.0"
    child = subprocess.Popen(
        ["sleep", "30"], env={**os.environ, STEP_MARKER_VAR: marker}, start_new_session=True
    )
    try:
        kills: list[tuple[int, int]] = []
        real_kill = os.kill

        def kill(pid: int, sig: int) -> None:
            kills.append((pid, sig))
            real_kill(pid, sig)

        monkeypatch.setattr(os, "kill", kill)
        step = RunningStep(job_id=1, step_id=0)
        step.procs = JobProcesses(-1, marker, None, STEP_MARKER_VAR, uid=os.getuid())
        task = types.SimpleNamespace(process=types.SimpleNamespace(pid=child.pid, returncode=None))
        step.tasks.append(task)  # type: ignore[arg-type]
        step.signal(signal.SIGCONT)
        assert kills == [(child.pid, signal.SIGCONT)]
        step.procs = None  # no tracker (yet): the root still gets it
        kills.clear()
        step.signal(signal.SIGCONT)
        assert kills == [(child.pid, signal.SIGCONT)]
    finally:
        child.kill()
        child.wait()


def test_marker_scan_matches_the_whole_variable_and_value_only() -> None:
    # the scan reads /proc/PID/environ itself: a variable whose name only ends or starts
    # like the marker's, or a value that only starts like it, is not the job's; one
    # first in the environment (no NUL before it) or with '=' in its value is
    import subprocess

    from noded.tracking import STEP_MARKER_VAR, JobProcesses, environ_values

    marker = f"test:{os.getpid()}:7.0"
    envs = {
        "exact_first": {STEP_MARKER_VAR: marker, "PATH": os.environ["PATH"]},
        "exact_last": {"PATH": os.environ["PATH"], STEP_MARKER_VAR: marker},
        "longer_value": {"PATH": os.environ["PATH"], STEP_MARKER_VAR: marker + "1"},
        "longer_name": {"PATH": os.environ["PATH"], "X" + STEP_MARKER_VAR: marker},
        "name_prefix": {"PATH": os.environ["PATH"], STEP_MARKER_VAR + "_X": marker},
    }
    children = {
        name: subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
        for name, env in envs.items()
    }
    try:
        values = dict(environ_values(STEP_MARKER_VAR))
        assert values[children["exact_first"].pid] == marker
        assert values[children["exact_last"].pid] == marker
        assert values[children["longer_value"].pid] == marker + "1"
        assert children["longer_name"].pid not in values
        assert children["name_prefix"].pid not in values
        found = JobProcesses(-1, marker, None, STEP_MARKER_VAR, uid=os.getuid()).pids()
        assert found == {children["exact_first"].pid, children["exact_last"].pid}
        other_user = JobProcesses(-1, marker, None, STEP_MARKER_VAR, uid=os.getuid() + 1)
        assert other_user.pids() == set()  # only the job's own user may claim it
    finally:
        for child in children.values():
            child.kill()
            child.wait()
