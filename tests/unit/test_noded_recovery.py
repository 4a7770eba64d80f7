"""A new noded settles what a killed one left: processes killed, cgroups gone, jobs reported."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import time
from typing import Any

import psutil
import pytest

from corral.clock import ManualClock
from corral.config import IdleGpuConfig
from corral.testing import wait_for
from corral.wire import corral_pb2 as pb
from noded import cgroups, records, spool
from noded.core.events import GpuUse, Launch, Spawn, Spawned
from noded.launcher import Launcher
from noded.tracking import MARKER_VAR, STEP_MARKER_VAR

Update = pb.JobStatusUpdate


def _marked_sleep(marker: str, var: str = MARKER_VAR) -> subprocess.Popen[bytes]:
    # its own session, as noded's jobs have: it survives the noded that started it
    proc = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, var: marker}, start_new_session=True
    )
    # once exec'd: before, /proc shows the test's own environment
    wait_for(lambda: pathlib.Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"))
    return proc


def _record(spool_dir: str, proc: subprocess.Popen[bytes], marker: str, **kw: Any) -> None:
    state = {
        "job_id": 5,
        "restart_count": 2,
        "marker": marker,
        "uid": os.getuid(),
        "root_pid": proc.pid,
        "root_created": psutil.Process(proc.pid).create_time(),
        "since": time.time() - 5,
        **kw,
    }
    spool.save(spool_dir, spool.JobState(**state))


def test_recover_kills_an_earlier_nodeds_jobs_and_reports_them_lost(
    tmp_path: pathlib.Path,
) -> None:
    spool_dir = str(tmp_path / "spool")
    os.makedirs(spool_dir)
    batch = _marked_sleep("n1:5:oldtoken")
    # a step task: its step's record names its step marker
    step_task = _marked_sleep("n1:9:oldtoken.0", STEP_MARKER_VAR)
    # marked by an earlier noded's token, but no record of noded's claims it: not ours
    unrecorded = _marked_sleep("n1:7:oldtoken")
    try:
        _record(spool_dir, batch, "n1:5:oldtoken")
        records.save_step(
            spool_dir, records.StepState(9, 0, "n1:9:oldtoken.0", os.getuid(), time.time() - 5)
        )
        pathlib.Path(spool.job_dir(spool_dir, 5)).mkdir()
        spool.take_instances(spool_dir, "oldtoken")
        reports: list[pb.JobStatusUpdate] = []
        launcher = Launcher("n1", spool_dir, reports.append)
        lost = asyncio.run(asyncio.wait_for(launcher.recover(), 30)).lost_job_ids()
        assert lost == [5]
        assert batch.wait(10) == -9 and step_task.wait(10) == -9
        assert unrecorded.poll() is None
        (upd,) = reports
        assert upd.job_id == 5 and upd.kind == Update.KIND_EXITED
        assert upd.end_reason == Update.END_NODE_FAIL and upd.restart_count == 2
        assert spool.load_all(spool_dir) == [] and records.load_steps(spool_dir) == []
        assert not os.path.exists(spool.job_dir(spool_dir, 5))
        instances = pathlib.Path(spool_dir, spool.INSTANCES_FILE).read_text().split()
        assert instances == [launcher.instance]
    finally:
        for p in (batch, step_task, unrecorded):
            p.kill()
            p.wait(10)


def test_recovery_kills_only_what_marker_uid_and_start_time_all_claim(
    tmp_path: pathlib.Path,
) -> None:
    """A record naming a process that is not the job's (another pid, a process without
    the marker, of another uid, or older than the record) kills nothing."""
    spool_dir = str(tmp_path / "spool")
    os.makedirs(spool_dir)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)  # no marker
    marked = _marked_sleep("n1:6:old")
    older = _marked_sleep("n1:8:old")
    try:
        # a root pid without the job's marker; root_created 0 (unknown) is no licence
        _record(spool_dir, bystander, "n1:5:old", root_created=0.0)
        _record(spool_dir, bystander, "n1:4:old", job_id=4)
        # the marker, but another uid than the record's
        _record(spool_dir, marked, "n1:6:old", job_id=6, uid=os.getuid() + 4242)
        # the marker and uid, but it started before the job was taken on
        _record(spool_dir, older, "n1:8:old", job_id=8, since=time.time() + 60)
        reports: list[pb.JobStatusUpdate] = []
        lost = asyncio.run(
            asyncio.wait_for(Launcher("n1", spool_dir, reports.append).recover(), 30)
        ).lost_job_ids()
        assert sorted(lost) == [4, 5, 6, 8]  # reported lost all the same: ctld requeues
        for p in (bystander, marked, older):
            assert p.poll() is None
    finally:
        for p in (bystander, marked, older):
            p.kill()
            p.wait(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a file of another uid")
def test_an_older_nodeds_state_file_counts_only_if_root_made_it(tmp_path: pathlib.Path) -> None:
    """Before records moved to <spool>/state, job<id>/state.json lay in the user's own job
    directory: one root made is still settled (an upgrade), one anyone else made is not."""
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    batch = _marked_sleep("n1:5:old")
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        created = psutil.Process(batch.pid).create_time()
        real = {"job_id": 5, "restart_count": 0, "marker": "n1:5:old", "uid": os.getuid()}
        real |= {"root_pid": batch.pid, "root_created": created}
        (spool_dir / "job00000005").mkdir()
        (spool_dir / "job00000005" / "state.json").write_text(json.dumps(real))
        forged = {**real, "job_id": 6, "root_pid": victim.pid, "marker": "x"}
        forged_file = spool_dir / "job00000006" / "state.json"
        forged_file.parent.mkdir()
        forged_file.write_text(json.dumps(forged))
        os.chown(forged_file, 4242, 4242)  # as a user would have written it
        assert [s.job_id for s in records.load_jobs(str(spool_dir))] == [5]
        launcher = Launcher("n1", str(spool_dir), print)
        lost = asyncio.run(asyncio.wait_for(launcher.recover(), 30)).lost_job_ids()
        assert lost == [5] and batch.wait(10) == -9 and victim.poll() is None
        assert not list(spool_dir.glob("*job*"))  # both directories gone, links unfollowed
    finally:
        for p in (batch, victim):
            p.kill()
            p.wait(10)


def test_a_clean_spool_recovers_nothing(tmp_path: pathlib.Path) -> None:
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher("n1", str(tmp_path), reports.append)
    assert asyncio.run(launcher.recover()).lost_job_ids() == [] and reports == []


def test_a_stale_job_cgroup_is_never_shared(tmp_path: pathlib.Path) -> None:
    base = tmp_path / "cg"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpu memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    manager, _ = cgroups.detect("v2", "corral", "n1", base=base)
    assert manager is not None
    empty_stale = base / "corral" / "n1" / "job_3"
    empty_stale.mkdir()  # a crashed noded's, already empty: replaced by a fresh one
    assert [c.dirs[""] for c in manager.stale()] == [empty_stale]
    fresh = manager.create(3)
    assert fresh.dirs[""] == empty_stale and empty_stale.is_dir()
    # one that cannot be removed (in the mimic: it holds files) is refused, not reused
    (empty_stale / "cgroup.procs").write_text("")
    with pytest.raises(cgroups.CgroupUnavailable):
        manager.create(3)


async def test_time_limit_signal_and_idle_window_on_virtual_time(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher(
        "n1",
        str(tmp_path),
        reports.append,
        idle=IdleGpuConfig(window_s=60, threshold_pct=5.0),
        clock=clock,
    )
    job = pb.Job(job_id=3, time_limit_s=600, spec=pb.JobSpec(signal="B:USR1@120"))
    request = pb.LaunchJobRequest(job=job, cluster="c", kill_wait_s=1.0)
    warned: list[int] = []
    launcher._send = lambda r, sig, batch_only: warned.append(sig)  # type: ignore[method-assign]
    # taken on and started as the machine says, but for the spawn: no process here
    taken = launcher.machine.handle(Launch(request), now=clock())
    launcher.carry_out([a for a in taken if not isinstance(a, Spawn)])
    launcher.handle(Spawned(3, 0))
    running = launcher.jobs[3]
    clock.advance(479)
    assert not warned and running.end_reason == Update.END_NONE
    clock.advance(1)
    assert warned == [signal.SIGUSR1]
    clock.advance(120)
    assert running.end_reason == Update.END_TIMEOUT
    assert running.kill_task is not None
    running.kill_task.cancel()
    # the idle-GPU window runs on the same clock
    launcher.handle(GpuUse(3, 0, (0.0,)))
    clock.advance(59)
    launcher.handle(GpuUse(3, 0, (0.0,)))
    assert not reports
    clock.advance(1)
    launcher.handle(GpuUse(3, 0, (0.0,)))
    assert [r.kind for r in reports] == [Update.KIND_IDLE_GPUS]


def test_undelivered_reports_are_kept_in_the_spool(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / spool.REPORTS_FILE)
    ended = [Update(job_id=3, kind=Update.KIND_EXITED, exit_code=2, restart_count=1)]
    spool.save_reports(path, ended)
    assert spool.load_reports(path) == ended
    spool.save_reports(path, [])  # all delivered: no file left
    assert not os.path.exists(path) and spool.load_reports(path) == []
    pathlib.Path(path).write_bytes(b"\xff\xff not a message")
    assert spool.load_reports(path) == []
