"""Watching running batch jobs: samples in, the machine's events out.

Every ``noded.sample_interval_s`` each running job's processes are sampled (memory
and CPU for accounting, its GPUs' use) and its progress file's age is read. What the
figures mean (over the memory limit without a cgroup, GPUs idle past the policy's
window, a stalled batch script) is the machine's to decide: the monitor only feeds it
MemoryUsed, GpuUse and Heartbeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from noded import progress
from noded.core.events import GpuUse, Heartbeat, MemoryUsed
from noded.running import RunningJob

if TYPE_CHECKING:
    from noded.launcher import Launcher

log = structlog.get_logger("noded")


async def run(launcher: Launcher) -> None:
    """Sample every running job each interval (of the launcher's clock): accounting,
    memory limit, idle GPUs, stalls."""
    while True:
        await launcher.clock.sleep(launcher.noded.sample_interval_s)
        for running in list(launcher.jobs.values()):
            try:
                sample(launcher, running)
                check_progress(launcher, running, launcher.clock())
            except Exception:
                log.exception("sampling failed", job_id=running.job_id)


def sample(launcher: Launcher, running: RunningJob) -> None:
    procs = running.procs
    if procs is None or not running.alive():
        return
    rss_kb = procs.sample(running.usage)
    if launcher.handle(MemoryUsed(running.job_id, running.restart_count, rss_kb)):
        return  # killed: over its memory limit
    indices = list(running.alloc.gpu_indices)
    if launcher.gpus is None or not indices:
        return
    samples = launcher.gpus.sample(indices, procs.pids())
    running.gpu.add(samples)
    utils = tuple(s.util_pct for s in samples)
    launcher.handle(GpuUse(running.job_id, running.restart_count, utils))


def check_progress(launcher: Launcher, running: RunningJob, now: float) -> None:
    """Its progress file's silence, for a job that has one and a stall timeout."""
    if not running.progress_file or not running.alive():
        return
    if not launcher.machine.watches_progress(running.job_id):
        return
    silent = progress.silent_for(running.progress_file, now)
    launcher.handle(Heartbeat(running.job_id, running.restart_count, silent))
