"""noded's job machine (noded/core/machine.py) as a Hypothesis state machine: random
interleavings of what ctld asks (launches, newer runs of a requeued job, retries,
cancels, signals, fences, shutdown), what the launcher's tasks answer (each phase's
script, the spawn, the exit, the reap, the cleanup, or noded's own failure instead),
the timers that fire, the monitor's samples, late events of runs that are gone, and
runs of an earlier noded taken over or found lost. A model of the launcher carries
the actions out as launcher.py does (a run's record from TakeOn or Adopt until its
CleanUp; one background task per run; timers dropped by CancelTimers and CleanUp) and
checks, at every step:

- exactly one final report (exited or launch failed) per run, none for a fenced run,
  and none at all of a fenced run (an idle-GPU report neither), before its cleanup;
- no action for a job without its record: nothing is signalled, noticed or timed
  after its cleanup began (the launcher has no process of it to act on any more);
- a newer run of a job is taken on only once the earlier one's cleanup is done;
- a run taken over from an earlier noded reports once, like any other;
- a late event of a gone run changes nothing, and an event of a run's own life in the
  wrong phase never comes from a launcher that follows the protocol (it would raise).
"""

from __future__ import annotations

import signal
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from corral.wire import corral_pb2 as pb
from noded.core.events import (
    Action,
    Adopt,
    AwaitExit,
    Broke,
    Cancel,
    CancelTimers,
    CleanedUp,
    CleanUp,
    EpilogDone,
    Event,
    Exited,
    Fence,
    FoundLost,
    GpuUse,
    Heartbeat,
    KillDue,
    Launch,
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
)
from noded.core.jobrun import MachineConfig
from noded.core.machine import JobMachine

Update = pb.JobStatusUpdate
JOBS = (1, 2, 3)
LOST_JOB = 99  # found lost at recovery: never launched here in the run of the test
FINAL = (Update.KIND_EXITED, Update.KIND_LAUNCH_FAILED)
RCS = (0, 1, -int(signal.SIGKILL), -int(signal.SIGTERM))


def request(job_id: int, run: int, limit: int, warn: str, gpus: int) -> pb.LaunchJobRequest:
    alloc = pb.NodeAllocation(node="n1", cpus=2, mem_mb=100)
    alloc.gpu_indices.extend(range(gpus))
    spec = pb.JobSpec(signal=warn, progress_timeout_s=60)
    job = pb.Job(
        job_id=job_id, restart_count=run, spec=spec, allocations=[alloc], time_limit_s=limit
    )
    return pb.LaunchJobRequest(job=job, cluster="c", kill_wait_s=5.0)


jobs = st.sampled_from(JOBS)
requests = st.tuples(
    st.sampled_from((0, 60)), st.sampled_from(("", "USR1@30", "B:USR1@30")), st.integers(0, 2)
)


class JobMachineProps(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = JobMachine(MachineConfig(node="n1"))
        self.now = 0.0
        self.records: dict[int, int] = {}  # job -> the run the launcher holds a record of
        self.tasks: dict[int, tuple[str, int]] = {}  # job -> (its task's answer, run)
        self.cleaning: dict[int, int] = {}  # job -> run: CleanUp sent, CleanedUp not yet
        self.timers: dict[tuple[int, str], RunEvent] = {}
        self.latest: dict[int, int] = {}  # job -> the newest run ctld launched
        self.finals: Counter[tuple[int, int]] = Counter()
        self.taken_over: set[tuple[int, int]] = set()
        self.ended_taken_over: set[tuple[int, int]] = set()
        self.lost_reports = 0

    @initialize(
        prolog=st.booleans(),
        epilog=st.booleans(),
        idle_window_s=st.sampled_from((0.0, 10.0)),
        progress_timeout_s=st.sampled_from((0.0, 30.0)),
    )
    def configure(
        self, prolog: bool, epilog: bool, idle_window_s: float, progress_timeout_s: float
    ) -> None:
        self.m = JobMachine(
            MachineConfig(
                node="n1",
                prolog=prolog,
                epilog=epilog,
                idle_window_s=idle_window_s,
                progress_timeout_s=progress_timeout_s,
            )
        )

    # ------------------------------------------------------------ the launcher, modelled

    def feed(self, event: Event) -> list[Action]:
        self.now += 1.0
        fenced = {(j, r.run) for j, r in self.m.jobs.items() if r.fenced}
        actions = self.m.handle(event, now=self.now)
        for action in actions:
            self.carry_out(action, event, fenced)
        return actions

    def carry_out(self, action: Action, event: Event, fenced: set[tuple[int, int]]) -> None:
        match action:
            case TakeOn(job_id, run) | Adopt(job_id, run):
                assert job_id not in self.records, f"job {job_id}: run {run} beside another"
                assert job_id not in self.cleaning, (
                    f"job {job_id}: run {run} taken on before run {self.cleaning.get(job_id)}'s "
                    "cleanup was done"
                )
                self.records[job_id] = run
            case Report(update):
                self.reported(update, event, fenced)
            case CleanUp(job_id):
                run = self.record_of(job_id, action)
                del self.records[job_id]
                self.drop_timers(job_id)
                expected = 0 if self.m.jobs[job_id].fenced else 1
                assert self.finals[(job_id, run)] == expected, (
                    f"job {job_id} run {run}: {self.finals[(job_id, run)]} final reports, "
                    f"{expected} expected"
                )
                if (job_id, run) in self.taken_over:
                    self.ended_taken_over.add((job_id, run))
                self.cleaning[job_id] = run
                self.tasks[job_id] = ("cleanup", run)
            case SetTimer(job_id, name, _delay, timer_event):
                self.record_of(job_id, action)
                self.timers[(job_id, name)] = timer_event
            case CancelTimers(job_id):
                self.record_of(job_id, action)
                self.drop_timers(job_id)
            case (
                RunProlog(job_id)
                | Spawn(job_id)
                | AwaitExit(job_id)
                | Reap(job_id)
                | RunEpilog(job_id)
            ):
                run = self.record_of(job_id, action)
                assert job_id not in self.tasks, f"job {job_id}: two tasks at once"
                what = {RunProlog: "prolog", Spawn: "spawn", AwaitExit: "exit", Reap: "reap"}
                self.tasks[job_id] = (what.get(type(action), "epilog"), run)
            case Signal(job_id) | Notice(job_id) | SaveRecord(job_id):
                self.record_of(job_id, action)

    def record_of(self, job_id: int, action: Action) -> int:
        assert job_id in self.records, f"{action!r}: job {job_id} has no record (cleaned up)"
        return self.records[job_id]

    def reported(
        self, update: pb.JobStatusUpdate, event: Event, fenced: set[tuple[int, int]]
    ) -> None:
        if isinstance(event, FoundLost):
            assert (update.job_id, update.kind) == (LOST_JOB, Update.KIND_EXITED)
            self.lost_reports += 1
            return
        run = self.m.jobs[update.job_id].run  # a report is of the run the machine holds
        assert (update.job_id, run) not in fenced, f"{update} of a fenced run"
        if update.kind not in FINAL:
            return
        assert update.restart_count == run, f"{update} names run {update.restart_count}"
        key = (update.job_id, run)
        assert self.finals[key] == 0, f"job {key[0]} run {key[1]}: a second final report"
        self.finals[key] += 1

    def drop_timers(self, job_id: int) -> None:
        for key in [k for k in self.timers if k[0] == job_id]:
            del self.timers[key]

    # ------------------------------------------------------------ what ctld asks

    @rule(job_id=jobs, newer=st.booleans(), req=requests)
    def launch(self, job_id: int, newer: bool, req: tuple[int, str, int]) -> None:
        """A new job, a newer run of a requeued one, or a retried LaunchJob of the run
        ctld last sent (only while that run is here: once it reported, ctld never
        sends it again)."""
        if job_id not in self.latest:
            run = 0
        elif newer:
            run = self.latest[job_id] + 1
        else:
            run = self.latest[job_id]
            here = self.m.jobs.get(job_id)
            if here is None or here.run != run:
                return
        self.latest[job_id] = run
        self.feed(Launch(request(job_id, run, *req)))

    @rule(job_id=jobs, kill_wait_s=st.sampled_from((0.0, 5.0)))
    def cancel(self, job_id: int, kill_wait_s: float) -> None:
        self.feed(Cancel(job_id, kill_wait_s))

    @rule(job_id=jobs, batch_only=st.booleans(), full=st.booleans())
    def signalled(self, job_id: int, batch_only: bool, full: bool) -> None:
        self.feed(Signalled(job_id, int(signal.SIGUSR1), batch_only, full))

    @rule(keep=st.frozensets(jobs))
    def fence(self, keep: frozenset[int]) -> None:
        self.feed(Fence(keep))

    @rule()
    def shutdown(self) -> None:
        self.feed(Shutdown(5.0))

    @precondition(lambda self: any(j not in self.m.jobs for j in JOBS))
    @rule(
        data=st.data(),
        elapsed_s=st.sampled_from((0.0, 45.0, 100.0)),
        rc=st.none() | st.sampled_from(RCS),
        req=requests,
    )
    def taken_over(
        self, data: st.DataObject, elapsed_s: float, rc: int | None, req: tuple[int, str, int]
    ) -> None:
        """A run an earlier noded started, kept by its supervisor, taken over."""
        job_id = data.draw(st.sampled_from([j for j in JOBS if j not in self.m.jobs]))
        if job_id in self.cleaning:
            return  # its record is still being cleaned up: no supervisor keeps it
        run = self.latest.get(job_id, -1) + 1
        self.latest[job_id] = run
        self.taken_over.add((job_id, run))
        self.feed(TakenOver(request(job_id, run, *req), elapsed_s, rc))
        if rc is None:
            assert self.tasks.get(job_id) == ("exit", run)

    @rule(run=st.integers(0, 3))
    def found_lost(self, run: int) -> None:
        before = self.lost_reports
        self.feed(FoundLost(LOST_JOB, run))
        assert self.lost_reports == before + 1

    # ------------------------------------------------------------ what the tasks answer

    @precondition(lambda self: bool(self.tasks))
    @rule(
        data=st.data(),
        failure=st.sampled_from(("", "script failed")),
        rc=st.sampled_from(RCS),
        spawned=st.booleans(),
        oom_kills=st.integers(0, 1),
    )
    def answer(
        self, data: st.DataObject, failure: str, rc: int, spawned: bool, oom_kills: int
    ) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.tasks)))
        what, run = self.tasks.pop(job_id)
        match what:
            case "prolog":
                self.feed(PrologDone(job_id, run, failure))
            case "spawn" if spawned:
                self.tasks[job_id] = ("exit", run)  # the same task waits for the exit
                self.feed(Spawned(job_id, run, contained=bool(oom_kills)))
            case "spawn":
                self.feed(SpawnFailed(job_id, run, "cannot start"))
            case "exit":
                self.feed(Exited(job_id, run, rc))
            case "reap":
                self.feed(Reaped(job_id, run, oom_kills, pb.JobUsage(max_rss_kb=5)))
            case "epilog":
                self.feed(EpilogDone(job_id, run, failure))
            case "cleanup":
                del self.cleaning[job_id]
                self.feed(CleanedUp(job_id, run))

    @precondition(lambda self: any(what != "cleanup" for what, _ in self.tasks.values()))
    @rule(data=st.data())
    def broke(self, data: st.DataObject) -> None:
        """A task fails instead of answering (a bug of noded's, logged); the cleanup's
        never does (it answers CleanedUp whatever happens)."""
        busy = sorted(j for j, (what, _) in self.tasks.items() if what != "cleanup")
        job_id = data.draw(st.sampled_from(busy))
        _, run = self.tasks.pop(job_id)
        self.feed(Broke(job_id, run))

    @precondition(lambda self: bool(self.timers))
    @rule(data=st.data())
    def timer_fires(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.timers)))
        self.feed(self.timers.pop(key))

    # ------------------------------------------------------------ the monitor's samples

    @precondition(lambda self: bool(self.records))
    @rule(
        data=st.data(),
        rss_kb=st.sampled_from((10, 10**6)),
        util=st.sampled_from((0.0, 90.0)),
        silent_s=st.none() | st.sampled_from((1.0, 600.0)),
        now_later=st.sampled_from((0.0, 30.0)),
    )
    def sample(
        self,
        data: st.DataObject,
        rss_kb: int,
        util: float,
        silent_s: float | None,
        now_later: float,
    ) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.records)))
        run = self.records[job_id]
        self.now += now_later  # an idle GPU's window may pass
        self.feed(MemoryUsed(job_id, run, rss_kb))
        self.feed(GpuUse(job_id, run, (util, util)))
        self.feed(Heartbeat(job_id, run, silent_s))

    @precondition(lambda self: any(r > 0 for r in self.latest.values()))
    @rule(data=st.data())
    def late_event_of_a_gone_run(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(j for j, r in self.latest.items() if r > 0)))
        here = self.m.jobs.get(job_id)
        old = data.draw(st.integers(0, self.latest[job_id] - 1))
        if here is not None and here.run == old:
            return  # that run is still here (the newer one waits for it)
        for late in (TimeLimit, KillDue, Exited, CleanedUp):
            assert self.feed(late(job_id, old)) == []

    # ------------------------------------------------------------ what holds throughout

    @invariant()
    def every_run_here_is_held_or_being_cleaned(self) -> None:
        for job_id, run in self.m.jobs.items():
            if run.phase == "cleanup":
                assert self.cleaning.get(job_id) == run.run
            else:
                assert self.records.get(job_id) == run.run

    @invariant()
    def taken_over_runs_ended_with_one_report(self) -> None:
        for key in self.ended_taken_over:
            assert self.finals[key] <= 1


JobMachineProps.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_job_machine_properties = JobMachineProps.TestCase
