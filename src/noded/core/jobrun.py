"""The job machine's state: what it knows of each run of a job here (machine.py changes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corral.jobsyntax import WarnSignal
from corral.wire import corral_pb2 as pb

Update = pb.JobStatusUpdate
Phase = Literal["prolog", "starting", "running", "reaping", "epilog", "cleanup"]
LIVE: tuple[Phase, ...] = ("starting", "running")  # its processes may exist


@dataclass(frozen=True, slots=True)
class MachineConfig:
    node: str
    prolog: bool = False  # noded.prolog is set
    epilog: bool = False
    idle_window_s: float = 0.0  # idle_gpus.window_s (0: no idle-GPU reports)
    idle_threshold_pct: float = 5.0
    progress_timeout_s: float = 0.0  # noded.progress_timeout_s (a job's own overrides)


@dataclass
class JobRun:
    """What the machine knows of one run of a job here. Only the machine changes it."""

    job: pb.Job
    cluster: str
    kill_wait_s: float
    alloc: pb.NodeAllocation
    phase: Phase = "prolog"
    cancel_requested: bool = False  # ctld (or a newer run, or shutdown) ends it
    fenced: bool = False  # ctld gave the job to others: killed, and nothing is reported
    end_reason: int = Update.END_NONE
    contained: bool = False  # in a cgroup: the kernel enforces its memory limit
    kill_armed: bool = False  # a SIGKILL is due after the grace
    killed: bool = False  # that SIGKILL went out
    warn: WarnSignal | None = None
    exit: tuple[int, int] = (0, 0)  # (code, signal) once it ended
    usage: pb.JobUsage = field(default_factory=pb.JobUsage)
    stall: str = ""  # who stopped making progress (detail of the END_STALLED report)
    idle_since: float = 0.0
    idle_reported: bool = False
    gpu_utils: tuple[float, ...] = ()  # the last GPU sample
    next: pb.LaunchJobRequest | None = None  # a newer run, waiting for this one to go

    @property
    def job_id(self) -> int:
        return self.job.job_id

    @property
    def run(self) -> int:
        return self.job.restart_count

    @property
    def mem_limit_kb(self) -> int:
        return int(self.alloc.mem_mb) * 1024
