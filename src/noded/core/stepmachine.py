"""The step machine: what a job step's tasks on this node call for, decided without I/O.

The step runner (steps.py) feeds each step's events here (a task exited, the step's
tasks went silent, ctld ends the job, the --signal warning or the kill is due, the
step is over) and carries out the actions (signal the step's processes, arm its kill,
report to ctld, log). Like the job machine (machine.py), it never touches a process,
a file or a clock; a step's state (``StepState``) is the pure part of the runner's
``RunningStep``, so the machine reads and changes that part only.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from corral.errors import CorralError
from corral.jobspec import warn_signal
from corral.wire import corral_pb2 as pb
from noded.core import stall
from noded.core.events import Log, Report

Update = pb.JobStatusUpdate
STALL_KILL_S = 5.0  # a stalled step here: SIGTERM now, SIGKILL this much later


@dataclass
class StepState:
    """What the machine knows of one step's tasks here. Only the machine changes it."""

    job_id: int
    step_id: int
    run: int = 0  # the job's restart_count when the step started
    stall_timeout_s: float = 0.0  # the job's progress timeout (0: not watched)
    stall: str = ""  # set once a task here was found stalled (reported once)
    kill_armed: bool = False  # its SIGKILL is due after a grace
    over: bool = False  # its end began: its timers cancelled, all of it killed and reaped
    gone: bool = False  # every process of it is gone: nothing of it is signalled again
    exits: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (code, signal)

    def takes(self, job_id: int, step_id: int | None, run: int | None) -> bool:
        """A signal for ``job_id`` (one step, or all: None) of run ``run`` (None: any) is
        this step's (a late signal for an earlier run of a requeued job is not)."""
        if run is not None and self.run != run:
            return False
        return self.job_id == job_id and (step_id is None or self.step_id == step_id)

    def watched(self) -> bool:
        """Its tasks' progress is watched (a timeout), and none was reported yet."""
        return self.stall_timeout_s > 0 and not self.stall

    def could_stall(self, silent_s: float | None) -> bool:
        """A task silent this long could be stalled (its GPUs are worth sampling)."""
        return self.watched() and silent_s is not None and silent_s >= self.stall_timeout_s


# ------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class TaskExited:
    rank: int
    rc: int  # asyncio's return code (-N: signal N)


@dataclass(frozen=True, slots=True)
class Silence:
    """A live task that opted in and is silent: for how long, and whether its GPUs work."""

    rank: int
    silent_s: float
    gpus_busy: bool = False


@dataclass(frozen=True, slots=True)
class Silent:
    """The step's live tasks that could be stalled (``StepState.could_stall``)."""

    tasks: tuple[Silence, ...]


@dataclass(frozen=True, slots=True)
class Terminate:
    """The job ends (or a newer run supersedes this one): SIGTERM, SIGKILL later."""

    kill_wait_s: float


@dataclass(frozen=True, slots=True)
class StepKillDue:
    pass


@dataclass(frozen=True, slots=True)
class StepWarnDue:
    signal: int


@dataclass(frozen=True, slots=True)
class StepOver:
    """The stream is done (every exit sent, or srun went away): nothing of it may stay."""


@dataclass(frozen=True, slots=True)
class StepGone:
    """Every process of the step here is gone."""

    tasks: int  # how many tasks were started


StepEvent = TaskExited | Silent | Terminate | StepKillDue | StepWarnDue | StepOver | StepGone

# ------------------------------------------------------------ actions


@dataclass(frozen=True, slots=True)
class SignalStep:
    """Send each signal, in turn, to every process of the step (each process once)."""

    signals: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KillAfter:
    wait_s: float


StepAction = SignalStep | KillAfter | Report | Log


def exit_of(rc: int) -> tuple[int, int]:
    """(exit code, signal) of asyncio's return code."""
    return (0, -rc) if rc < 0 else (rc, 0)


def warning_for(job: pb.Job, now: float) -> tuple[float, int] | None:
    """--signal=SIG@T without B reaches the steps (not the batch shell) T seconds before
    the time limit: (in how many seconds, which signal), or None (no such warning, or it
    is past: a step started after the warning does not get it, as with Slurm)."""
    if job.time_limit_s <= 0 or not job.start_time:
        return None
    try:
        warn = warn_signal(job.spec)
    except CorralError:
        return None
    if warn is None or warn.batch_only:
        return None
    delay = job.start_time + job.time_limit_s - warn.seconds - now
    return (delay, warn.signal) if delay > 0 else None


class StepMachine:
    def __init__(self, node: str) -> None:
        self.node = node

    def handle(self, step: StepState, event: StepEvent, now: float) -> list[StepAction]:
        if step.gone:
            return []  # a late timer: whatever held its pids is not the step's any more
        match event:
            case TaskExited(rank, rc):
                step.exits[rank] = exit_of(rc)
                return []
            case Silent(tasks):
                # once its end began, a silence is the end's: no stall to report
                return [] if step.over else self._stalled(step, tasks, now)
            case Terminate(kill_wait_s):
                # its end kills and reaps all of it: a kill timer armed now would
                # outlive the step (the end cancelled its timers already)
                return [] if step.over else self._terminate(step, kill_wait_s)
            case StepOver():
                step.over = True
                return [SignalStep((signal.SIGKILL,))]
            case StepKillDue():
                return [SignalStep((signal.SIGKILL,))]
            case StepWarnDue(sig):
                fields = {"job_id": step.job_id}
                return [
                    Log("info", "signalling the step before the time limit", fields),
                    SignalStep((sig,)),
                ]
            case StepGone(tasks):
                step.gone = True
                return [Report(self._ended(step, tasks, now))]
        raise TypeError(f"not a step event: {event!r}")

    @staticmethod
    def _terminate(step: StepState, kill_wait_s: float) -> list[StepAction]:
        actions: list[StepAction] = [SignalStep((signal.SIGCONT, signal.SIGTERM))]
        if not step.kill_armed:
            step.kill_armed = True
            actions.append(KillAfter(kill_wait_s))
        return actions

    def _stalled(self, step: StepState, tasks: tuple[Silence, ...], now: float) -> list[StepAction]:
        """A task that opted in and then went silent for the job's stall timeout while
        its GPUs idle is hung. The most silent such task here is named (it stopped
        first: ranks that wait on it in a collective fall silent later); ctld hears
        END_STALLED with the node and rank, and requeues the job."""
        idle = [t for t in tasks if not t.gpus_busy and step.could_stall(t.silent_s)]
        if not idle:
            return []
        worst = max(idle, key=lambda t: t.silent_s)  # the first of equals, as before
        what = f"step {step.job_id}.{step.step_id}"
        step.stall = stall.stall_detail(self.node, worst.rank, what, worst.silent_s)
        fields = {
            "job_id": step.job_id,
            "step_id": step.step_id,
            "node": self.node,
            "rank": worst.rank,
            "silent_s": round(worst.silent_s),
        }
        update = Update(
            job_id=step.job_id,
            step_id=step.step_id,
            kind=Update.KIND_EXITED,
            end_reason=Update.END_STALLED,
            time=now,
            exit_signal=int(signal.SIGKILL),
            restart_count=step.run,
            detail=step.stall,
        )
        # ctld kills every part of the job at once; this covers a ctld away meanwhile
        return [
            Log("error", "step task stalled: the job is to be requeued", fields),
            Report(update),
            *self._terminate(step, STALL_KILL_S),
        ]

    @staticmethod
    def _ended(step: StepState, tasks: int, now: float) -> pb.JobStatusUpdate:
        """KIND_STEP_ENDED: the highest exit code here, else the first signal."""
        codes = [c for c, sig in step.exits.values() if not sig]
        signals = [sig for _, sig in step.exits.values() if sig]
        # a task whose end was never seen was killed at the step's end
        unfinished = int(signal.SIGKILL) if len(step.exits) < tasks else 0
        return Update(
            job_id=step.job_id,
            step_id=step.step_id,
            kind=Update.KIND_STEP_ENDED,
            time=now,
            exit_code=max(codes, default=0),
            exit_signal=signals[0] if signals else unfinished,
        )
