"""A launch path other than the batch shim plugs into the launcher (the containers' seam):
it starts the run's process, or refuses; the machine and the executor do the rest."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time

import pytest

from corral.errors import LaunchError
from corral.wire import corral_pb2 as pb
from noded import records
from noded.launcher import Launcher, RunningJob
from noded.tracking import JobProcesses

pytestmark = pytest.mark.timeout(60)

Update = pb.JobStatusUpdate


class Refusing:
    async def start(self, running: RunningJob) -> None:
        raise LaunchError("no such image")


class Direct:
    """Runs the job's argv itself (as a container runtime would run its entry point)."""

    async def start(self, running: RunningJob) -> None:
        proc = await asyncio.create_subprocess_exec(*running.job.spec.argv, start_new_session=True)
        running.process = proc
        running.procs = JobProcesses(proc.pid, running.marker, None, uid=os.getuid())


def request(argv: list[str]) -> pb.LaunchJobRequest:
    job = pb.Job(job_id=9, uid=os.getuid(), spec=pb.JobSpec(argv=argv))
    return pb.LaunchJobRequest(job=job, cluster="c", kill_wait_s=1.0)


async def settled(launcher: Launcher) -> None:
    deadline = time.monotonic() + 30
    while launcher.machine.jobs or launcher._tasks:
        assert time.monotonic() < deadline, "the run never settled"
        await asyncio.sleep(0.01)


async def test_a_refused_start_is_a_launch_failure_and_is_cleaned_up(
    tmp_path: pathlib.Path,
) -> None:
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher("n1", str(tmp_path), reports.append, launch_path=Refusing())
    await launcher.launch(request(["true"]))
    await settled(launcher)
    assert [(r.kind, r.detail) for r in reports] == [(Update.KIND_LAUNCH_FAILED, "no such image")]
    assert not launcher.jobs and records.load_jobs(str(tmp_path)) == []


async def test_a_path_that_starts_a_process_gets_its_exit_reported(tmp_path: pathlib.Path) -> None:
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher("n1", str(tmp_path), reports.append, launch_path=Direct())
    await launcher.launch(request(["sh", "-c", "exit 3"]))
    await settled(launcher)
    assert [(r.kind, r.exit_code, r.end_reason) for r in reports] == [
        (Update.KIND_EXITED, 3, Update.END_NONE)
    ]
    assert records.load_jobs(str(tmp_path)) == []
