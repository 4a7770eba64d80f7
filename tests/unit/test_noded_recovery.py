"""A new noded settles what a killed one left: processes killed, cgroups gone, jobs reported."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess

import psutil
import pytest

from corral.config import IdleGpuConfig
from corral.wire import corral_pb2 as pb
from noded import cgroups, spool
from noded.clock import ManualClock
from noded.launcher import Launcher, RunningJob
from noded.tracking import MARKER_VAR

Update = pb.JobStatusUpdate


def _marked_sleep(marker: str) -> subprocess.Popen[bytes]:
    # its own session, as noded's jobs have: it survives the noded that started it
    return subprocess.Popen(
        ["sleep", "60"], env={**os.environ, MARKER_VAR: marker}, start_new_session=True
    )


def test_recover_kills_an_earlier_nodeds_jobs_and_reports_them_lost(
    tmp_path: pathlib.Path,
) -> None:
    spool_dir = str(tmp_path / "spool")
    os.makedirs(spool_dir)
    batch = _marked_sleep("n1:5:oldtoken")
    step_task = _marked_sleep("n1:9:oldtoken")  # a step task: no state file of its own
    other = _marked_sleep("n1:7:someoneelse")  # another cluster's noded: not ours to kill
    try:
        spool.save(
            spool_dir,
            spool.JobState(
                job_id=5,
                restart_count=2,
                marker="n1:5:oldtoken",
                uid=os.getuid(),
                root_pid=batch.pid,
                root_created=psutil.Process(batch.pid).create_time(),
            ),
        )
        spool.take_instances(spool_dir, "oldtoken")
        reports: list[pb.JobStatusUpdate] = []
        launcher = Launcher("n1", spool_dir, reports.append)
        lost = asyncio.run(asyncio.wait_for(launcher.recover(), 30))
        assert lost == [5]
        assert batch.wait(10) == -9 and step_task.wait(10) == -9
        assert other.poll() is None
        (upd,) = reports
        assert upd.job_id == 5 and upd.kind == Update.KIND_EXITED
        assert upd.end_reason == Update.END_NODE_FAIL and upd.restart_count == 2
        assert spool.load_all(spool_dir) == []
        assert not os.path.exists(spool.job_dir(spool_dir, 5))
        instances = pathlib.Path(spool_dir, spool.INSTANCES_FILE).read_text().split()
        assert instances == [launcher.instance]
    finally:
        for p in (batch, step_task, other):
            p.kill()
            p.wait(10)


def test_a_clean_spool_recovers_nothing(tmp_path: pathlib.Path) -> None:
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher("n1", str(tmp_path), reports.append)
    assert asyncio.run(launcher.recover()) == [] and reports == []


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
    running = RunningJob(
        job=job, cluster="c", kill_wait_s=1.0, marker="m", alloc=pb.NodeAllocation()
    )
    warned: list[int] = []
    launcher._send = lambda r, sig, batch_only: warned.append(sig)  # type: ignore[method-assign]
    launcher._arm_timers(running)
    clock.advance(479)
    assert not warned and running.end_reason == Update.END_NONE
    clock.advance(1)
    assert warned == [signal.SIGUSR1]
    clock.advance(120)
    assert running.end_reason == Update.END_TIMEOUT
    assert running.kill_task is not None
    running.kill_task.cancel()
    # the idle-GPU window runs on the same clock
    launcher._check_idle(running, [0.0])
    clock.advance(59)
    launcher._check_idle(running, [0.0])
    assert not reports
    clock.advance(1)
    launcher._check_idle(running, [0.0])
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
