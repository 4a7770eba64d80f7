"""The stall rule both machines apply (the batch script's and each srun task's).

Pure: the progress files themselves are progress.py's. A process that opted in (touched
its ``$CORRAL_PROGRESS_FILE``) and then stayed silent for the job's stall timeout while
its GPUs idled is hung; one whose GPUs work is slow, not hung.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.wire import corral_pb2 as pb


def timeout_for(job: pb.Job, default_s: float) -> float:
    """The job's stall timeout: --progress-timeout, else noded.progress_timeout_s."""
    return float(job.spec.progress_timeout_s or default_s)


def gpus_busy(utils: Sequence[float], threshold_pct: float) -> bool:
    """Any GPU at or above the idle threshold: the process is slow, not hung."""
    return any(u >= threshold_pct for u in utils)


def stall_detail(node: str, rank: int, what: str, silent_s: float) -> str:
    """The words ctld records (requeued event, sacct Reason, corral why)."""
    return f"progress stalled on node {node} rank {rank} ({what}): no heartbeat for {silent_s:.0f}s"
