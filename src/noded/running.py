"""The launcher's record of one run of a batch job: its processes, cgroup and timers.

The machine (machine.py) holds what it decided of the run (``state``); this record
holds what carries the decisions out. Its properties read the state, never set it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from corral.clock import Timer
from corral.wire import corral_pb2 as pb
from noded.cgroups import JobCgroup
from noded.core.jobrun import JobRun
from noded.limits import GpuStats
from noded.supervisor import SupervisedProcess, Supervisor
from noded.tracking import JobProcesses, Usage


@dataclass
class RunningJob:
    state: JobRun
    marker: str  # CORRAL_JOB_MARKER: tells this run's processes from any other's
    process: SupervisedProcess | None = None  # the batch shell (its supervisor's child)
    supervisor: Supervisor | None = None  # the job's supervisor here
    procs: JobProcesses | None = None  # every process of the job
    cgroup: JobCgroup | None = None
    usage: Usage = field(default_factory=Usage)
    gpu: GpuStats = field(default_factory=GpuStats)
    timers: dict[str, Timer] = field(default_factory=dict)  # by the machine's names
    progress_file: str = ""  # the opt-in progress heartbeat (CORRAL_PROGRESS_FILE)
    checkpoint_dir: str = ""  # CORRAL_CHECKPOINT_DIR: its last change is the last checkpoint
    since: float = field(default_factory=time.time)  # taken on: before any process of it
    spawned_at: float = 0.0  # its batch shell passed the gate (wall time; 0: not yet)

    @property
    def job(self) -> pb.Job:
        return self.state.job

    @property
    def job_id(self) -> int:
        return self.state.job_id

    @property
    def restart_count(self) -> int:
        return self.state.run

    @property
    def cluster(self) -> str:
        return self.state.cluster

    @property
    def alloc(self) -> pb.NodeAllocation:
        return self.state.alloc

    @property
    def cancel_requested(self) -> bool:
        return self.state.cancel_requested

    @property
    def fenced(self) -> bool:
        return self.state.fenced

    @property
    def end_reason(self) -> int:
        return self.state.end_reason

    @property
    def mem_limit_kb(self) -> int:
        return self.state.mem_limit_kb

    @property
    def kill_task(self) -> Timer | None:
        """The SIGKILL due after the grace, if one is (the machine's "kill" timer)."""
        return self.timers.get("kill")

    def alive(self) -> bool:
        """Its batch shell runs (spawned and not yet reaped by asyncio)."""
        return self.process is not None and self.process.returncode is None
