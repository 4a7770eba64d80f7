"""The job machine's vocabulary: the events it is fed and the actions it answers with.

Events say what happened (ctld asked, a process started or ended, a timer fired, a
sample was taken); actions say what to do (spawn, signal, report, clean up). Both are
plain values: the machine (machine.py) turns events into actions without touching a
process, a file or a clock, and the launcher (launcher.py) carries the actions out.
An event about one run of a job names it by ``job_id`` and ``run`` (the job's
restart_count): an event of an earlier run that arrives late (a timer, a sample) finds
that run gone and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.wire import corral_pb2 as pb

# ------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class Launch:
    """ctld's LaunchJob: a new run, a retried request, or a newer run of a requeued job."""

    request: pb.LaunchJobRequest


@dataclass(frozen=True, slots=True)
class RunEvent:
    """Something that happened to one run of a job."""

    job_id: int
    run: int


@dataclass(frozen=True, slots=True)
class PrologDone(RunEvent):
    failure: str = ""  # why it failed ("": it succeeded, or there is none)


@dataclass(frozen=True, slots=True)
class Spawned(RunEvent):
    """The batch script runs (past its gate, in its cgroup when ``contained``)."""

    contained: bool = False


@dataclass(frozen=True, slots=True)
class SpawnFailed(RunEvent):
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Exited(RunEvent):
    """The batch shell ended: its return code as asyncio gives it (-N: signal N)."""

    rc: int = 0


@dataclass(frozen=True, slots=True)
class Reaped(RunEvent):
    """Every process of the job is gone; what the kernel and the samples say of it."""

    oom_kills: int = 0
    usage: pb.JobUsage = field(default_factory=pb.JobUsage)


@dataclass(frozen=True, slots=True)
class EpilogDone(RunEvent):
    failure: str = ""


@dataclass(frozen=True, slots=True)
class CleanedUp(RunEvent):
    """Its cores, cgroup, job directory and record are gone."""


@dataclass(frozen=True, slots=True)
class Broke(RunEvent):
    """noded's own handling of the run failed (a bug, logged where it happened)."""


@dataclass(frozen=True, slots=True)
class TimeLimit(RunEvent):
    pass


@dataclass(frozen=True, slots=True)
class WarnDue(RunEvent):
    """--signal's lead time before the limit is reached."""


@dataclass(frozen=True, slots=True)
class KillDue(RunEvent):
    """The grace after SIGTERM is over."""


@dataclass(frozen=True, slots=True)
class MemoryUsed(RunEvent):
    rss_kb: int = 0  # every process of the job together


@dataclass(frozen=True, slots=True)
class GpuUse(RunEvent):
    utils: tuple[float, ...] = ()  # per GPU of the job, percent


@dataclass(frozen=True, slots=True)
class Heartbeat(RunEvent):
    """How long the batch script's progress file has been silent (None: never touched)."""

    silent_s: float | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """SignalJob with terminate: SIGTERM now, SIGKILL after ``kill_wait_s``."""

    job_id: int
    kill_wait_s: float
    why: str = ""  # the CANCELLED line's end (" DUE TO NODE FAILURE")


@dataclass(frozen=True, slots=True)
class Signalled:
    """SignalJob with a signal (scancel -s): the batch shell, or every process (full)."""

    job_id: int
    signal: int
    batch_only: bool = False
    full: bool = False


@dataclass(frozen=True, slots=True)
class Fence:
    """ctld lets this node keep only ``keep`` (registration, or cut off too long)."""

    keep: frozenset[int]


@dataclass(frozen=True, slots=True)
class Shutdown:
    kill_wait_s: float


@dataclass(frozen=True, slots=True)
class FoundLost(RunEvent):
    """A new noded found this run of an earlier noded's here (and killed it)."""


@dataclass(frozen=True, slots=True)
class TakenOver:
    """A run an earlier noded started, taken over by this one (its supervisor kept its
    processes): running for ``elapsed_s`` since its batch shell passed the gate, or, with
    ``rc`` (asyncio's return code), ended while no noded was here."""

    request: pb.LaunchJobRequest
    elapsed_s: float
    rc: int | None = None
    contained: bool = False


Event = Launch | RunEvent | Cancel | Signalled | Fence | Shutdown | TakenOver

# ------------------------------------------------------------ actions


@dataclass(frozen=True, slots=True)
class TakeOn:
    """A new run: the launcher makes its record of the run's processes (and keeps the
    request in the spool: a later noded takes the run over with it)."""

    job_id: int
    run: int
    request: pb.LaunchJobRequest | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Adopt:
    """A run taken over: the launcher's record of it is the one takeover.py made."""

    job_id: int
    run: int


@dataclass(frozen=True, slots=True)
class AwaitExit:
    """A taken-over run's batch shell runs: answer Exited when it ends."""

    job_id: int


@dataclass(frozen=True, slots=True)
class SaveRecord:
    """Write the run's record in ``<spool>/state`` (records.py): a new noded finds it."""

    job_id: int


@dataclass(frozen=True, slots=True)
class RunProlog:
    job_id: int


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start the batch script (its launch path: batch.py); answer Spawned or SpawnFailed,
    then Exited when it ends."""

    job_id: int


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Feed ``event`` back after ``delay`` s; a timer of the same ``name`` is replaced."""

    job_id: int
    name: str
    delay: float
    event: RunEvent


@dataclass(frozen=True, slots=True)
class CancelTimers:
    job_id: int


@dataclass(frozen=True, slots=True)
class Signal:
    """Send ``signals`` in order to every process of the job (or its batch shell only)."""

    job_id: int
    signals: tuple[int, ...]
    batch_only: bool = False


@dataclass(frozen=True, slots=True)
class Notice:
    """Append slurmstepd's ``*** JOB N ON NODE CANCELLED AT ...<why> ***`` to its stderr."""

    job_id: int
    why: str = ""


@dataclass(frozen=True, slots=True)
class Reap:
    """Kill whatever the batch shell left behind; answer Reaped."""

    job_id: int


@dataclass(frozen=True, slots=True)
class RunEpilog:
    job_id: int


@dataclass(frozen=True, slots=True)
class Report:
    """Tell ctld (through the outbox)."""

    update: pb.JobStatusUpdate


@dataclass(frozen=True, slots=True)
class Drain:
    """A fault of this node: ctld drains it."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class CleanUp:
    """Release its cores, remove its cgroup, job directory and record; answer CleanedUp."""

    job_id: int


@dataclass(frozen=True, slots=True)
class Log:
    level: str  # "info", "warning", "error"
    message: str
    fields: Mapping[str, object] = field(default_factory=dict)


Action = (
    TakeOn
    | Adopt
    | AwaitExit
    | SaveRecord
    | RunProlog
    | Spawn
    | SetTimer
    | CancelTimers
    | Signal
    | Notice
    | Reap
    | RunEpilog
    | Report
    | Drain
    | CleanUp
    | Log
)
