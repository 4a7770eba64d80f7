"""What the monitor's samples of a run mean (the job machine's rules for them, pure):
its memory over its limit without a cgroup, its GPUs idle past the idle-GPU policy's
window, its batch script's progress heartbeat silent past its stall timeout."""

from __future__ import annotations

import signal
from collections.abc import Callable

from corral.wire import corral_pb2 as pb
from noded.core import stall
from noded.core.events import Action, Log, Report, Signal
from noded.core.jobrun import JobRun, MachineConfig

Update = pb.JobStatusUpdate
Terminate = Callable[[JobRun, float], list[Action]]


def memory(run: JobRun, rss_kb: int) -> list[Action]:
    """Without a cgroup nothing else holds it to its memory limit."""
    limit = run.mem_limit_kb
    if run.phase != "running" or run.contained or not limit or rss_kb <= limit:
        return []
    if run.end_reason != Update.END_NONE:
        return []
    fields = {"job_id": run.job_id, "rss_kb": rss_kb, "limit_kb": limit}
    run.end_reason = Update.END_OUT_OF_MEMORY
    return [
        Log("warning", "job over its memory limit: killed", fields),
        Signal(run.job_id, (signal.SIGKILL,)),
    ]


def gpus(config: MachineConfig, run: JobRun, utils: tuple[float, ...], now: float) -> list[Action]:
    """The idle-GPU policy's window: reported once it passed, cleared when they work;
    nothing of a fenced run (ctld gave the job to others: it must not hear of it)."""
    if run.phase != "running" or run.fenced:
        return []
    run.gpu_utils = utils
    window, threshold = config.idle_window_s, config.idle_threshold_pct
    if window <= 0 or not utils:
        return []
    idle = Update(job_id=run.job_id, kind=Update.KIND_IDLE_GPUS, time=0)
    if max(utils) >= threshold:
        actions: list[Action] = [Report(idle)] if run.idle_reported else []
        run.idle_since, run.idle_reported = 0.0, False
        return actions
    if not run.idle_since:
        run.idle_since = now
    if run.idle_reported or now - run.idle_since < window:
        return []
    run.idle_reported = True
    idle.time = run.idle_since
    fields = {"job_id": run.job_id, "since": run.idle_since, "threshold_pct": threshold}
    return [Log("warning", "job's GPUs idle", fields), Report(idle)]


def progress(
    config: MachineConfig, run: JobRun, silent_s: float | None, terminate: Terminate
) -> list[Action]:
    """A job that opted in (touched its progress file) and then stopped touching it
    for its stall timeout, while its GPUs idle, is stalled: killed, reported
    END_STALLED with the node and rank, and requeued by ctld."""
    timeout = stall.timeout_for(run.job, config.progress_timeout_s)
    if timeout <= 0 or run.stall or run.phase != "running":
        return []
    if silent_s is None or silent_s < timeout:
        return []  # never touched (not opted in), or recent
    busy = stall.gpus_busy(run.gpu_utils, config.idle_threshold_pct)
    if run.alloc.gpu_indices and (busy or not run.gpu_utils):
        return []  # GPUs at work (or not sampled yet): slow, not hung
    node = config.node
    run.stall = stall.stall_detail(node, 0, "batch script", silent_s)
    run.end_reason = Update.END_STALLED
    fields = {"job_id": run.job_id, "node": node, "rank": 0, "silent_s": round(silent_s)}
    return [
        Log("error", "job stalled: killed to be requeued", fields),
        *terminate(run, run.kill_wait_s),
    ]
