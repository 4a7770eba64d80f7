"""srun tasks' progress heartbeats: a silent rank is named (node, rank) and reported once."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
from collections.abc import Sequence
from typing import Any

from corral.config import IdleGpuConfig
from corral.wire import corral_pb2 as pb
from noded import progress
from noded.gpu import GpuSample
from noded.steps import RunningStep, StepRunner, Task


async def _verify(job_id: int, step_id: int) -> Any:
    raise AssertionError("not called")


class Busy:
    """A GPU backend whose GPUs are at the given use."""

    name = "fake"

    def __init__(self, util: float) -> None:
        self.util = util

    def sample(self, indices: Sequence[int], pids: Any) -> list[GpuSample]:
        return [GpuSample(i, self.util, 0.0) for i in indices]


async def _task(tmp: pathlib.Path, rank: int, gpus: list[int]) -> Task:
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    path = progress.step_file(str(tmp), 7, 0, rank)
    assert progress.make_file(path, os.getuid(), os.getgid())
    exited = asyncio.get_running_loop().create_future()
    return Task(rank, proc, -1, exited, (-1, -1), progress=path, gpus=gpus)


async def test_the_most_silent_rank_is_named_once_and_stopped(tmp_path: pathlib.Path) -> None:
    reports: list[pb.JobStatusUpdate] = []
    runner = StepRunner("node02", "m-{job_id}", _verify, reports.append, spool_dir=str(tmp_path))
    running = RunningStep(7, 0, run=2, stall_timeout_s=5.0)
    running.tasks = [await _task(tmp_path, 2, []), await _task(tmp_path, 3, [])]
    runner.steps[(7, 0)] = running
    assert runner.check_progress(1000.0) == []  # untouched: not opted in
    os.utime(running.tasks[0].progress, (998.0, 998.0))
    os.utime(running.tasks[1].progress, (998.0, 998.0))
    assert runner.check_progress(1002.0) == []  # 4 s: within the timeout
    os.utime(running.tasks[0].progress, (996.0, 996.0))
    os.utime(running.tasks[1].progress, (990.0, 990.0))
    (detail,) = runner.check_progress(1004.0)
    assert detail == "progress stalled on node node02 rank 3 (step 7.0): no heartbeat for 14s"
    (upd,) = reports
    assert (upd.kind, upd.end_reason) == (upd.KIND_EXITED, upd.END_STALLED)
    assert (upd.job_id, upd.step_id, upd.restart_count, upd.detail) == (7, 0, 2, detail)
    assert runner.check_progress(1010.0) == []  # reported once
    for task in running.tasks:  # stopped here too (SIGTERM)
        assert await asyncio.wait_for(task.process.wait(), 10) == -signal.SIGTERM
    assert running.kill_task is not None
    running.kill_task.cancel()


async def test_a_silent_rank_whose_gpus_work_is_slow_not_hung(tmp_path: pathlib.Path) -> None:
    reports: list[pb.JobStatusUpdate] = []
    gpus = Busy(80.0)
    runner = StepRunner(
        "node02",
        "m-{job_id}",
        _verify,
        reports.append,
        spool_dir=str(tmp_path),
        gpus=gpus,  # type: ignore[arg-type]
        idle=IdleGpuConfig(threshold_pct=5.0),
    )
    running = RunningStep(7, 0, run=0, stall_timeout_s=5.0)
    running.tasks = [await _task(tmp_path, 0, [1])]
    runner.steps[(7, 0)] = running
    os.utime(running.tasks[0].progress, (900.0, 900.0))
    assert runner.check_progress(1000.0) == []
    gpus.util = 0.0
    assert len(runner.check_progress(1000.0)) == 1
    assert await asyncio.wait_for(running.tasks[0].process.wait(), 10) == -signal.SIGTERM
    assert running.kill_task is not None
    running.kill_task.cancel()
