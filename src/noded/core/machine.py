"""The job machine: every decision about a batch job's life on this node, and nothing else.

``JobMachine.handle(*events, now=...)`` takes what happened (events.py) and returns
what to do, as plain values: it never touches a process, a file, a cgroup or a clock
(``now`` comes in with the events), so its rules are tested by feeding events and
reading actions (tests/unit/test_job_machine.py). The launcher (launcher.py) carries
the actions out and feeds back what came of them, as dask's worker does with its
``WorkerState`` (docs/architecture.md, "noded inside").

A run goes through these phases, in order, each ended by the event named::

    prolog --PrologDone--> starting --Spawned--> running --Exited--> reaping
      --Reaped--> epilog --EpilogDone--> cleanup --CleanedUp--> (gone)

(no prolog or epilog configured: that phase is skipped). A failed prolog or spawn, a
cancel during the prolog, or noded's own failure goes straight to cleanup. The end is
reported once, before cleanup: ctld releases the job's resources only for a clean node.
A newer run of the same job (a requeue) waits until this one is gone.
"""

from __future__ import annotations

import signal

from corral.errors import CorralError, InvalidTransition
from corral.jobspec import warn_signal
from corral.wire import corral_pb2 as pb
from noded.core import samplerules, stall
from noded.core.events import (
    Action,
    Adopt,
    AwaitExit,
    Broke,
    Cancel,
    CancelTimers,
    CleanedUp,
    CleanUp,
    Drain,
    EpilogDone,
    Event,
    Exited,
    Fence,
    FoundLost,
    GpuUse,
    Heartbeat,
    KillDue,
    Launch,
    Log,
    MemoryUsed,
    Notice,
    PrologDone,
    Reap,
    Reaped,
    Report,
    RunEpilog,
    RunEvent,
    RunProlog,
    SaveRecord,
    SetTimer,
    Shutdown,
    Signal,
    Signalled,
    Spawn,
    Spawned,
    SpawnFailed,
    TakenOver,
    TakeOn,
    TimeLimit,
    WarnDue,
)
from noded.core.jobrun import LIVE, JobRun, MachineConfig, Phase

Update = pb.JobStatusUpdate
INTERNAL_ERROR = "noded internal error (see its log)"


def _exit_of(rc: int) -> tuple[int, int]:
    """(code, signal) of asyncio's return code (-N: killed by signal N)."""
    return (0, -rc) if rc < 0 else (rc, 0)


class JobMachine:
    def __init__(self, config: MachineConfig) -> None:
        self.config = config
        self.jobs: dict[int, JobRun] = {}

    def handle(self, *events: Event, now: float) -> list[Action]:
        """The actions ``events`` call for, in order (``now``: the wall clock's time)."""
        actions: list[Action] = []
        for event in events:
            actions += self._handle(event, now)
        return actions

    # ------------------------------------------------------------ queries

    def fenceable(self, keep: set[int] | frozenset[int]) -> list[int]:
        """The jobs a Fence keeping ``keep`` kills."""
        return [
            job_id
            for job_id, run in self.jobs.items()
            if job_id not in keep and not run.fenced and run.phase != "cleanup"
        ]

    def watches_progress(self, job_id: int) -> bool:
        """Whether a Heartbeat of this job could matter (saves reading its file)."""
        run = self.jobs.get(job_id)
        if run is None or run.phase != "running" or run.stall:
            return False
        return stall.timeout_for(run.job, self.config.progress_timeout_s) > 0

    # ------------------------------------------------------------ dispatch

    def _handle(self, event: Event, now: float) -> list[Action]:
        match event:
            case Launch(request):
                return self._launch(request)
            case Cancel(job_id, kill_wait_s, why):
                return self._cancel(job_id, kill_wait_s, why)
            case Signalled():
                return self._signalled(event)
            case Fence(keep):
                return self._fence(keep)
            case Shutdown(kill_wait_s):
                return self._shutdown(kill_wait_s)
            case FoundLost():
                return self._found_lost(event, now)
            case TakenOver():
                return self._taken_over(event)
            case RunEvent():
                run = self.jobs.get(event.job_id)
                if run is None or run.run != event.run:
                    return []  # an earlier run's (a late timer or sample): it is gone
                return self._for_run(run, event, now)
        raise TypeError(f"not an event: {event!r}")

    def _for_run(self, run: JobRun, event: RunEvent, now: float) -> list[Action]:
        match event:
            case PrologDone(failure=failure):
                return self._prolog_done(run, failure, now)
            case Spawned(contained=contained):
                return self._spawned(run, contained)
            case SpawnFailed(detail=detail):
                self._expect(run, event, "starting")
                return self._failed(run, detail, Update.END_NONE, now)
            case Exited(rc=rc):
                self._expect(run, event, "running")
                run.phase, run.exit = "reaping", _exit_of(rc)
                return [CancelTimers(run.job_id), Reap(run.job_id)]
            case Reaped(oom_kills=oom_kills, usage=usage):
                return self._reaped(run, oom_kills, usage, now)
            case EpilogDone(failure=failure):
                return self._epilog_done(run, failure, now)
            case CleanedUp():
                return self._cleaned_up(run)
            case Broke():
                if run.phase == "cleanup":
                    return []
                kill = [Signal(run.job_id, (signal.SIGKILL,))] if run.phase in LIVE else []
                return kill + self._failed(run, INTERNAL_ERROR, Update.END_NONE, now)
            case TimeLimit():
                return self._time_limit(run)
            case WarnDue():
                return self._warn(run)
            case KillDue():
                if run.phase not in LIVE:
                    return []
                run.killed = True
                return [Signal(run.job_id, (signal.SIGKILL,))]
            case MemoryUsed(rss_kb=rss_kb):
                return samplerules.memory(run, rss_kb)
            case GpuUse(utils=utils):
                return samplerules.gpus(self.config, run, utils, now)
            case Heartbeat(silent_s=silent_s):
                return samplerules.progress(self.config, run, silent_s, self._terminate)
        raise TypeError(f"not an event of a run: {event!r}")

    @staticmethod
    def _expect(run: JobRun, event: RunEvent, phase: Phase) -> None:
        if run.phase != phase:
            raise InvalidTransition(
                f"job {run.job_id} run {run.run}: {type(event).__name__} in phase {run.phase}"
            )

    # ------------------------------------------------------------ a run's life

    def _launch(self, request: pb.LaunchJobRequest) -> list[Action]:
        job = request.job
        current = self.jobs.get(job.job_id)
        if current is None:
            return self._take_on(request)
        if job.restart_count <= current.run:
            return []  # a retried LaunchJob: it is already here
        return self._supersede(current, request)

    def _take_on(self, request: pb.LaunchJobRequest) -> list[Action]:
        job, node = request.job, self.config.node
        alloc = next((a for a in job.allocations if a.node == node), None)
        run = JobRun(
            job=job,
            cluster=request.cluster,
            kill_wait_s=request.kill_wait_s or 30.0,
            alloc=alloc or pb.NodeAllocation(node=node),
        )
        self.jobs[job.job_id] = run
        # its record before anything runs: a new noded must find it
        actions: list[Action] = [TakeOn(run.job_id, run.run, request), SaveRecord(run.job_id)]
        if self.config.prolog:
            return [*actions, RunProlog(run.job_id)]
        run.phase = "starting"
        return [*actions, Spawn(run.job_id)]

    def _taken_over(self, event: TakenOver) -> list[Action]:
        """An earlier noded's run, kept by its supervisor: on from where it is, its
        timers counted from its start (a limit passed meanwhile is due at once)."""
        job, node = event.request.job, self.config.node
        if job.job_id in self.jobs:
            return []
        alloc = next((a for a in job.allocations if a.node == node), None)
        run = JobRun(
            job=job,
            cluster=event.request.cluster,
            kill_wait_s=event.request.kill_wait_s or 30.0,
            alloc=alloc or pb.NodeAllocation(node=node),
            phase="running",
            contained=event.contained,
        )
        self.jobs[job.job_id] = run
        fields = {"job_id": run.job_id, "run": run.run, "node": node}
        actions: list[Action] = [
            Adopt(run.job_id, run.run),
            Log("info", "job of an earlier noded taken over", fields),
        ]
        if event.rc is not None:  # it ended while no noded was here: on to its end
            run.phase, run.exit = "reaping", _exit_of(event.rc)
            return [*actions, Reap(run.job_id)]
        return [
            *actions,
            SaveRecord(run.job_id),
            *self._timers(run, event.elapsed_s),
            AwaitExit(run.job_id),
        ]

    def _supersede(self, current: JobRun, request: pb.LaunchJobRequest) -> list[Action]:
        """A requeued job's next run came while its earlier copy here still ends (its
        kill may even come later): that copy is killed, and the new run starts once it
        is gone, so the two never run at once nor share a job directory or cgroup."""
        queued = current.next
        if queued is None or queued.job.restart_count < request.job.restart_count:
            current.next = request
        actions: list[Action] = [
            Log(
                "info",
                "earlier run superseded: the new one waits for it to end",
                {
                    "job_id": current.job_id,
                    "run": current.run,
                    "next_run": request.job.restart_count,
                },
            )
        ]
        if current.phase == "cleanup" or current.cancel_requested:
            return actions
        current.cancel_requested = True
        return actions + self._terminate(current, request.kill_wait_s or current.kill_wait_s)

    def _prolog_done(self, run: JobRun, failure: str, now: float) -> list[Action]:
        self._expect(run, PrologDone(run.job_id, run.run), "prolog")
        if failure:
            return self._failed(run, f"prolog failed: {failure}", Update.END_PROLOG_FAILED, now)
        if run.cancel_requested:  # cancelled during its prolog: it never starts
            run.exit = (0, int(signal.SIGTERM))
            return self._end(run, now)
        run.phase = "starting"
        return [Spawn(run.job_id)]

    def _spawned(self, run: JobRun, contained: bool) -> list[Action]:
        self._expect(run, Spawned(run.job_id, run.run), "starting")
        run.phase, run.contained = "running", contained
        actions: list[Action] = [SaveRecord(run.job_id), *self._timers(run)]
        if run.cancel_requested:  # ended while it was being started: now it can be
            actions.append(Signal(run.job_id, (signal.SIGCONT, signal.SIGTERM)))
            if run.killed:
                actions.append(Signal(run.job_id, (signal.SIGKILL,)))
        return actions

    def _timers(self, run: JobRun, elapsed_s: float = 0.0) -> list[Action]:
        limit = run.job.time_limit_s
        if limit <= 0:
            return []
        due = max(0.0, limit - elapsed_s)
        actions: list[Action] = [SetTimer(run.job_id, "limit", due, TimeLimit(run.job_id, run.run))]
        try:
            run.warn = warn_signal(run.job.spec)
        except CorralError as exc:
            fields = {"job_id": run.job_id, "error": str(exc)}
            return [*actions, Log("warning", "bad --signal ignored", fields)]
        if run.warn is None:
            return actions
        if elapsed_s > limit - run.warn.seconds:
            return actions  # its warning was due while no noded was here: too late now
        at = max(0.0, limit - run.warn.seconds - elapsed_s)
        return [*actions, SetTimer(run.job_id, "warn", at, WarnDue(run.job_id, run.run))]

    def _reaped(self, run: JobRun, oom_kills: int, usage: pb.JobUsage, now: float) -> list[Action]:
        self._expect(run, Reaped(run.job_id, run.run), "reaping")
        if run.end_reason == Update.END_NONE and oom_kills > 0:
            run.end_reason = Update.END_OUT_OF_MEMORY  # the kernel's OOM kill, in its cgroup
        run.usage = usage
        if not self.config.epilog:
            return self._end(run, now)
        run.phase = "epilog"
        return [RunEpilog(run.job_id)]

    def _epilog_done(self, run: JobRun, failure: str, now: float) -> list[Action]:
        self._expect(run, EpilogDone(run.job_id, run.run), "epilog")
        if not failure:
            return self._end(run, now)
        fields = {"job_id": run.job_id, "node": self.config.node, "error": failure}
        return [
            Log("error", "epilog failed", fields),
            Drain("Epilog error", failure),
            *self._end(run, now),
        ]

    def _end(self, run: JobRun, now: float) -> list[Action]:
        """Its one exit report, then its cleanup."""
        code, sig = run.exit
        fields: dict[str, object] = {
            "job_id": run.job_id,
            "node": self.config.node,
            "exit_code": code,
            "signal": sig,
            "end_reason": Update.EndReason.Name(run.end_reason),  # type: ignore[arg-type]
            "max_rss_kb": run.usage.max_rss_kb,
            "fenced": run.fenced,
        }
        actions: list[Action] = [Log("info", "job exited", fields)]
        if not run.fenced:  # else the job is another node's now: ctld must not hear of it
            update = Update(
                job_id=run.job_id,
                kind=Update.KIND_EXITED,
                time=now,
                exit_code=code,
                exit_signal=sig,
                signalled_by_request=run.cancel_requested and sig != 0,
                end_reason=run.end_reason,  # type: ignore[arg-type]
                usage=run.usage,
                restart_count=run.run,
                detail=run.stall,
            )
            actions.append(Report(update))
        run.phase = "cleanup"
        return [*actions, CleanUp(run.job_id)]

    def _failed(self, run: JobRun, detail: str, end_reason: int, now: float) -> list[Action]:
        """It could not be started (or noded failed it): LAUNCH_FAILED, then its cleanup."""
        fields = {"job_id": run.job_id, "node": self.config.node, "error": detail}
        actions: list[Action] = [Log("warning", "launch failed", fields)]
        if not run.fenced:
            update = Update(
                job_id=run.job_id,
                kind=Update.KIND_LAUNCH_FAILED,
                time=now,
                detail=detail,
                end_reason=end_reason,  # type: ignore[arg-type]
                restart_count=run.run,
            )
            actions.append(Report(update))
        run.phase = "cleanup"
        return [*actions, CleanUp(run.job_id)]

    def _cleaned_up(self, run: JobRun) -> list[Action]:
        self._expect(run, CleanedUp(run.job_id, run.run), "cleanup")
        del self.jobs[run.job_id]
        return self._take_on(run.next) if run.next is not None else []

    # ------------------------------------------------------------ limits and signals

    def _terminate(self, run: JobRun, wait_s: float) -> list[Action]:
        """SIGCONT and SIGTERM to every process of the job now, SIGKILL after wait_s (a
        fence's immediate kill replaces a longer grace)."""
        if run.phase not in LIVE:
            return []  # in its prolog nothing of it runs; after its exit nothing is left
        actions: list[Action] = [Signal(run.job_id, (signal.SIGCONT, signal.SIGTERM))]
        if not run.kill_armed or (run.fenced and wait_s == 0):
            run.kill_armed = True
            kill = KillDue(run.job_id, run.run)
            actions.append(SetTimer(run.job_id, "kill", max(wait_s, 0.0), kill))
        return actions

    def _time_limit(self, run: JobRun) -> list[Action]:
        if run.phase != "running":
            return []
        fields = {"job_id": run.job_id, "limit_s": run.job.time_limit_s}
        run.end_reason = Update.END_TIMEOUT
        return [
            Log("info", "time limit reached", fields),
            Notice(run.job_id, " DUE TO TIME LIMIT"),
            *self._terminate(run, run.kill_wait_s),
        ]

    def _warn(self, run: JobRun) -> list[Action]:
        warn = run.warn
        if run.phase != "running" or warn is None:
            return []
        fields = {
            "job_id": run.job_id,
            "signal": signal.Signals(warn.signal).name,
            "seconds_left": warn.seconds,
            "batch_only": warn.batch_only,
        }
        actions: list[Action] = [Log("info", "signalling before the time limit", fields)]
        if warn.batch_only:  # without B: the steps get it, each from its own timer
            actions.append(Signal(run.job_id, (warn.signal,), batch_only=True))
        return actions

    def _cancel(self, job_id: int, kill_wait_s: float, why: str = "") -> list[Action]:
        run = self.jobs.get(job_id)
        if run is None or run.phase == "cleanup":
            return []
        actions: list[Action] = [] if run.cancel_requested else [Notice(job_id, why)]
        run.cancel_requested = True
        return actions + self._terminate(run, kill_wait_s)

    def _signalled(self, event: Signalled) -> list[Action]:
        run = self.jobs.get(event.job_id)
        if run is None or run.phase == "cleanup":
            return []
        if not (event.batch_only or event.full):
            return []  # only the steps get it (Slurm 22.05)
        return [Signal(run.job_id, (event.signal,), batch_only=event.batch_only)]

    def _fence(self, keep: frozenset[int]) -> list[Action]:
        actions: list[Action] = []
        for job_id in self.fenceable(keep):
            run = self.jobs[job_id]
            fields = {"job_id": job_id, "node": self.config.node}
            actions.append(Log("warning", "job no longer this node's: killed (fenced)", fields))
            run.fenced = run.cancel_requested = True
            actions += self._terminate(run, 0.0)
        return actions

    def _shutdown(self, kill_wait_s: float) -> list[Action]:
        actions: list[Action] = []
        for run in list(self.jobs.values()):
            run.next = None  # nothing new starts on a node going down
            if run.phase != "cleanup":
                run.cancel_requested = True
                actions += self._terminate(run, kill_wait_s)
        return actions

    def _found_lost(self, event: FoundLost, now: float) -> list[Action]:
        """A run an earlier noded left here, killed at recovery: ctld requeues it."""
        node = self.config.node
        update = Update(
            job_id=event.job_id,
            kind=Update.KIND_EXITED,
            time=now,
            exit_signal=int(signal.SIGKILL),
            end_reason=Update.END_NODE_FAIL,
            detail=f"noded on {node} restarted while the job ran: its processes were killed",
            restart_count=event.run,
        )
        fields = {"job_id": event.job_id, "node": node}
        return [
            Log("warning", "job of an earlier noded killed and reported lost", fields),
            Report(update),
        ]
