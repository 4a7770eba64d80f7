"""A requeued job's next run never overlaps its earlier copy on the same node.

ctld may send the new run's LaunchJob before (or without) the earlier copy's kill
reaching the node: the new run must wait for the old one to be gone, not be dropped as
a retry (the job would then never run) nor start beside it (it would run twice)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import pwd
import time

from corral.wire import corral_pb2 as pb
from noded.launcher import Launcher

Update = pb.JobStatusUpdate
SCRIPT = '#!/bin/sh\necho "run $SLURM_RESTART_COUNT start"\ntrap "exit 0" TERM\nsleep 60 &\nwait\n'


def _request(work: pathlib.Path, run: int) -> pb.LaunchJobRequest:
    me = pwd.getpwuid(os.getuid())
    job = pb.Job(
        job_id=7,
        user=me.pw_name,
        uid=me.pw_uid,
        gid=me.pw_gid,
        restart_count=run,
        spec=pb.JobSpec(script=SCRIPT, work_dir=str(work), open_mode="append"),
        stdout_path=str(work / "out"),
        stderr_path=str(work / "out"),
    )
    return pb.LaunchJobRequest(job=job, cluster="c", kill_wait_s=5.0)


async def test_a_newer_run_waits_for_the_earlier_copy_and_then_starts(
    tmp_path: pathlib.Path,
) -> None:
    reports: list[pb.JobStatusUpdate] = []
    launcher = Launcher("n1", str(tmp_path / "spool"), reports.append)
    out = tmp_path / "out"

    async def until(check: object, what: str) -> None:
        deadline = time.monotonic() + 30
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    await launcher.launch(_request(tmp_path, 0))
    await until(lambda: out.exists() and "run 0 start" in out.read_text(), "run 0")
    first = launcher.jobs[7]
    await launcher.launch(_request(tmp_path, 0))  # a retried LaunchJob changes nothing
    assert launcher.jobs[7] is first and not first.cancel_requested
    await launcher.launch(_request(tmp_path, 1))  # no kill of run 0 ever came
    await until(lambda: "run 1 start" in out.read_text(), "run 1 to start")
    second = launcher.jobs[7]
    assert second is not first and second.restart_count == 1
    assert first.process is not None and first.process.returncode is not None
    exits = [(u.restart_count, u.kind) for u in reports]
    assert exits == [(0, Update.KIND_EXITED)]  # run 0 ended before run 1 began
    assert out.read_text().splitlines() == ["run 0 start", "run 1 start"]
    await launcher.shutdown(5.0)
    assert not launcher.jobs
