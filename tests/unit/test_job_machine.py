"""noded's job machine, fed events and read for actions: no process, file or clock.

The orderings that matter: a cancel during the prolog, a newer run while the old one
ends, a fence during the epilog, an exit after the time limit, OOM (the kernel's and
noded's own), a stalled batch script, idle GPUs and their clearing, late events of a
run that is gone."""

from __future__ import annotations

import ast
import pathlib
import signal

import pytest

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb
from noded.core.events import (
    Action,
    Broke,
    Cancel,
    CancelTimers,
    CleanedUp,
    CleanUp,
    Drain,
    EpilogDone,
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
    RunProlog,
    SaveRecord,
    SetTimer,
    Shutdown,
    Signal,
    Signalled,
    Spawn,
    Spawned,
    SpawnFailed,
    TakeOn,
    TimeLimit,
    WarnDue,
)
from noded.core.jobrun import MachineConfig
from noded.core.machine import JobMachine

pytestmark = pytest.mark.timeout(30)

Update = pb.JobStatusUpdate
TERM = (signal.SIGCONT, signal.SIGTERM)
KILL = (signal.SIGKILL,)
SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "noded"


def machine(**kw: object) -> JobMachine:
    return JobMachine(MachineConfig(node="n1", **kw))  # type: ignore[arg-type]


def request(
    job_id: int = 7, run: int = 0, *, kill_wait_s: float = 30.0, **job: object
) -> pb.LaunchJobRequest:
    alloc = pb.NodeAllocation(node="n1", cpus=2, mem_mb=job.pop("mem_mb", 0))  # type: ignore[arg-type]
    alloc.gpu_indices.extend(job.pop("gpus", []))  # type: ignore[arg-type]
    spec = pb.JobSpec(signal=job.pop("signal", ""), progress_timeout_s=job.pop("timeout", 0))  # type: ignore[arg-type]
    message = pb.Job(job_id=job_id, restart_count=run, spec=spec, allocations=[alloc], **job)  # type: ignore[arg-type]
    return pb.LaunchJobRequest(job=message, cluster="c", kill_wait_s=kill_wait_s)


def acts(actions: list[Action]) -> list[Action]:
    """The actions without the log lines (what is carried out)."""
    return [a for a in actions if not isinstance(a, Log)]


def reports(actions: list[Action]) -> list[pb.JobStatusUpdate]:
    return [a.update for a in actions if isinstance(a, Report)]


def running(m: JobMachine, req: pb.LaunchJobRequest, *, contained: bool = False) -> None:
    """Take the job on and start it (no prolog configured)."""
    job = req.job
    assert acts(m.handle(Launch(req), now=0.0)) == [
        TakeOn(job.job_id, job.restart_count),
        SaveRecord(job.job_id),
        Spawn(job.job_id),
    ]
    m.handle(Spawned(job.job_id, job.restart_count, contained), now=0.0)


def ended(m: JobMachine, job_id: int, rc: int, *, oom_kills: int = 0) -> list[Action]:
    """The batch shell exits with ``rc``: the actions up to its cleanup."""
    run = m.jobs[job_id].run
    assert acts(m.handle(Exited(job_id, run, rc), now=1.0)) == [CancelTimers(job_id), Reap(job_id)]
    return m.handle(Reaped(job_id, run, oom_kills, pb.JobUsage(max_rss_kb=5)), now=2.0)


def test_a_job_runs_its_prolog_script_epilog_and_reports_once() -> None:
    m = machine(prolog=True, epilog=True)
    req = request()
    assert acts(m.handle(Launch(req), now=0.0)) == [TakeOn(7, 0), SaveRecord(7), RunProlog(7)]
    assert m.handle(Launch(req), now=0.0) == []  # a retried LaunchJob: already here
    assert m.handle(PrologDone(7, 0), now=0.0) == [Spawn(7)]
    assert m.handle(Spawned(7, 0), now=0.0) == [SaveRecord(7)]  # no limit: no timers
    assert acts(ended(m, 7, 3)) == [RunEpilog(7)]
    done = m.handle(EpilogDone(7, 0), now=3.0)
    (exit_,) = reports(done)
    assert (exit_.kind, exit_.exit_code, exit_.exit_signal, exit_.time) == (
        Update.KIND_EXITED,
        3,
        0,
        3.0,
    )
    assert exit_.usage.max_rss_kb == 5 and not exit_.signalled_by_request
    assert acts(done)[-1] == CleanUp(7)
    assert 7 in m.jobs  # until its cleanup is done
    assert m.handle(CleanedUp(7, 0), now=4.0) == [] and not m.jobs


def test_a_cancel_during_the_prolog_never_starts_the_job() -> None:
    m = machine(prolog=True)
    m.handle(Launch(request()), now=0.0)
    # the notice goes to its stderr; nothing of it runs yet, so nothing is signalled
    assert m.handle(Cancel(7, 30.0), now=0.0) == [Notice(7)]
    assert m.handle(Cancel(7, 30.0), now=0.0) == []  # one notice
    done = m.handle(PrologDone(7, 0), now=1.0)
    assert Spawn(7) not in done and acts(done)[-1] == CleanUp(7)
    (exit_,) = reports(done)
    assert (exit_.kind, exit_.exit_signal, exit_.signalled_by_request) == (
        Update.KIND_EXITED,
        signal.SIGTERM,
        True,
    )


def test_a_failed_prolog_or_spawn_is_a_launch_failure() -> None:
    m = machine(prolog=True)
    m.handle(Launch(request()), now=0.0)
    done = m.handle(PrologDone(7, 0, "exit 1"), now=1.0)
    (failed,) = reports(done)
    assert (failed.kind, failed.end_reason, failed.detail) == (
        Update.KIND_LAUNCH_FAILED,
        Update.END_PROLOG_FAILED,
        "prolog failed: exit 1",
    )
    m.handle(CleanedUp(7, 0), now=1.0)
    m = machine()
    m.handle(Launch(request()), now=0.0)
    (failed,) = reports(m.handle(SpawnFailed(7, 0, "cannot set up the job's files"), now=1.0))
    assert (failed.kind, failed.end_reason) == (Update.KIND_LAUNCH_FAILED, Update.END_NONE)


def test_a_newer_run_waits_for_the_earlier_one_to_end() -> None:
    m = machine(epilog=True)
    running(m, request(run=0, kill_wait_s=10.0))
    # the requeued job's next run comes before the kill of this one (or without it)
    assert acts(m.handle(Launch(request(run=1, kill_wait_s=5.0)), now=0.0)) == [
        Signal(7, TERM),
        SetTimer(7, "kill", 5.0, KillDue(7, 0)),
    ]
    assert acts(m.handle(Launch(request(run=2)), now=0.0)) == []  # the newest waits instead
    assert acts(m.handle(Launch(request(run=1)), now=0.0)) == []  # older than the queued one
    assert (next_run := m.jobs[7].next) is not None and next_run.job.restart_count == 2
    assert acts(ended(m, 7, -15)) == [RunEpilog(7)]
    # the earlier run still reports its own end (ctld ignores a stale run's)
    (exit_,) = reports(m.handle(EpilogDone(7, 0), now=3.0))
    assert (exit_.restart_count, exit_.signalled_by_request) == (0, True)
    # only once it is gone does the newer run start
    assert acts(m.handle(CleanedUp(7, 0), now=4.0)) == [TakeOn(7, 2), SaveRecord(7), Spawn(7)]
    assert m.jobs[7].run == 2 and not m.jobs[7].cancel_requested


def test_a_newer_run_during_the_earlier_ones_cleanup_waits_too() -> None:
    m = machine()
    running(m, request(run=0))
    assert acts(ended(m, 7, 0))[-1] == CleanUp(7)
    assert acts(m.handle(Launch(request(run=1)), now=0.0)) == []  # its directory still goes
    assert acts(m.handle(Launch(request(run=0)), now=0.0)) == []  # a late retry: not rerun
    assert acts(m.handle(CleanedUp(7, 0), now=1.0)) == [TakeOn(7, 1), SaveRecord(7), Spawn(7)]


def test_late_events_of_a_run_that_is_gone_change_nothing() -> None:
    m = machine()
    running(m, request(run=0, time_limit_s=60))
    ended(m, 7, 0)
    m.handle(CleanedUp(7, 0), now=1.0)
    running(m, request(run=1, time_limit_s=60))
    for late in (TimeLimit(7, 0), KillDue(7, 0), MemoryUsed(7, 0, 10**9), GpuUse(7, 0, (0.0,))):
        assert m.handle(late, now=5.0) == []
    assert m.jobs[7].end_reason == Update.END_NONE


def test_a_fence_during_the_epilog_kills_and_reports_nothing() -> None:
    m = machine(epilog=True)
    running(m, request())
    assert acts(ended(m, 7, 0)) == [RunEpilog(7)]
    assert m.fenceable({8}) == [7]
    assert acts(m.handle(Fence(frozenset({8})), now=2.0)) == []  # nothing of it runs now
    done = m.handle(EpilogDone(7, 0), now=3.0)
    assert reports(done) == [] and acts(done) == [CleanUp(7)]  # it is another node's now
    assert m.fenceable(set()) == []


def test_a_fence_kills_now_even_after_a_longer_grace() -> None:
    m = machine()
    running(m, request())
    assert acts(m.handle(Cancel(7, 30.0), now=0.0)) == [
        Notice(7),
        Signal(7, TERM),
        SetTimer(7, "kill", 30.0, KillDue(7, 0)),
    ]
    assert acts(m.handle(Fence(frozenset()), now=0.0)) == [
        Signal(7, TERM),
        SetTimer(7, "kill", 0.0, KillDue(7, 0)),  # replaces the 30 s one
    ]
    assert m.handle(KillDue(7, 0), now=0.0) == [Signal(7, KILL)]
    assert reports(ended(m, 7, -9)) == []


def test_an_exit_after_the_time_limit_reports_timeout() -> None:
    m = machine()
    req = request(time_limit_s=600, signal="B:USR1@120", kill_wait_s=10.0)
    m.handle(Launch(req), now=0.0)
    assert m.handle(Spawned(7, 0), now=0.0) == [
        SaveRecord(7),
        SetTimer(7, "limit", 600, TimeLimit(7, 0)),
        SetTimer(7, "warn", 480.0, WarnDue(7, 0)),
    ]
    assert acts(m.handle(WarnDue(7, 0), now=480.0)) == [
        Signal(7, (signal.SIGUSR1,), batch_only=True)
    ]
    assert acts(m.handle(TimeLimit(7, 0), now=600.0)) == [
        Notice(7, " DUE TO TIME LIMIT"),
        Signal(7, TERM),
        SetTimer(7, "kill", 10.0, KillDue(7, 0)),
    ]
    (exit_,) = reports(ended(m, 7, -signal.SIGTERM))
    assert (exit_.end_reason, exit_.exit_signal, exit_.signalled_by_request) == (
        Update.END_TIMEOUT,
        signal.SIGTERM,
        False,
    )


def test_a_warning_without_b_is_the_steps_and_a_bad_one_is_ignored() -> None:
    m = machine()
    running(m, request(time_limit_s=600, signal="USR1@60"))
    assert acts(m.handle(WarnDue(7, 0), now=540.0)) == []  # the steps' own timers send it
    m = machine()
    m.handle(Launch(request(time_limit_s=600, signal="B:NOPE@60")), now=0.0)
    armed = m.handle(Spawned(7, 0), now=0.0)
    assert acts(armed) == [SaveRecord(7), SetTimer(7, "limit", 600, TimeLimit(7, 0))]
    assert any(isinstance(a, Log) and a.message == "bad --signal ignored" for a in armed)


def test_the_kernels_oom_kill_and_noded_own_memory_limit() -> None:
    m = machine()
    running(m, request(mem_mb=1), contained=True)
    assert m.handle(MemoryUsed(7, 0, 4096), now=1.0) == []  # the cgroup holds it
    (exit_,) = reports(ended(m, 7, -9, oom_kills=1))
    assert exit_.end_reason == Update.END_OUT_OF_MEMORY
    m = machine()
    running(m, request(mem_mb=1))  # no cgroup: noded holds it to its limit
    assert m.handle(MemoryUsed(7, 0, 1024), now=1.0) == []
    assert acts(m.handle(MemoryUsed(7, 0, 1025), now=1.0)) == [Signal(7, KILL)]
    assert m.handle(MemoryUsed(7, 0, 2048), now=2.0) == []  # killed once
    (exit_,) = reports(ended(m, 7, -9))
    assert exit_.end_reason == Update.END_OUT_OF_MEMORY


def test_a_stalled_batch_script_is_killed_and_reported_once() -> None:
    m = machine(progress_timeout_s=60.0, idle_threshold_pct=5.0)
    running(m, request(gpus=[0], kill_wait_s=10.0))
    assert m.watches_progress(7)
    assert m.handle(Heartbeat(7, 0, None), now=1.0) == []  # never touched: not opted in
    assert m.handle(Heartbeat(7, 0, 90.0), now=1.0) == []  # its GPUs not sampled yet
    m.handle(GpuUse(7, 0, (80.0,)), now=1.0)
    assert m.handle(Heartbeat(7, 0, 90.0), now=1.0) == []  # GPUs at work: slow, not hung
    m.handle(GpuUse(7, 0, (0.0,)), now=2.0)
    assert m.handle(Heartbeat(7, 0, 59.0), now=2.0) == []  # within its timeout
    assert acts(m.handle(Heartbeat(7, 0, 61.0), now=2.0)) == [
        Signal(7, TERM),
        SetTimer(7, "kill", 10.0, KillDue(7, 0)),
    ]
    assert not m.watches_progress(7) and m.handle(Heartbeat(7, 0, 99.0), now=3.0) == []
    (exit_,) = reports(ended(m, 7, -15))
    assert exit_.end_reason == Update.END_STALLED
    assert exit_.detail == "progress stalled on node n1 rank 0 (batch script): no heartbeat for 61s"


def test_idle_gpus_are_reported_after_the_window_and_cleared_when_they_work() -> None:
    m = machine(idle_window_s=60.0, idle_threshold_pct=5.0)
    running(m, request(gpus=[0, 1]))
    assert m.handle(GpuUse(7, 0, (1.0, 2.0)), now=100.0) == []
    assert m.handle(GpuUse(7, 0, (1.0, 2.0)), now=159.0) == []
    (idle,) = reports(m.handle(GpuUse(7, 0, (1.0, 2.0)), now=160.0))
    assert (idle.kind, idle.time) == (Update.KIND_IDLE_GPUS, 100.0)
    assert m.handle(GpuUse(7, 0, (0.0, 0.0)), now=300.0) == []  # reported once
    (cleared,) = reports(m.handle(GpuUse(7, 0, (0.0, 50.0)), now=301.0))
    assert (cleared.kind, cleared.time) == (Update.KIND_IDLE_GPUS, 0.0)  # time 0: cleared
    assert m.handle(GpuUse(7, 0, (0.0, 50.0)), now=302.0) == []


def test_a_fenced_runs_idle_gpus_are_not_reported() -> None:
    """The job is another node's now: ctld must hear nothing of this copy."""
    m = machine(idle_window_s=60.0, idle_threshold_pct=5.0)
    running(m, request(gpus=[0, 1]))
    assert m.handle(GpuUse(7, 0, (1.0, 2.0)), now=100.0) == []
    m.handle(Fence(frozenset()), now=101.0)
    assert reports(m.handle(GpuUse(7, 0, (1.0, 2.0)), now=200.0)) == []


def test_signals_cancel_and_shutdown() -> None:
    m = machine()
    running(m, request(run=0))
    assert m.handle(Signalled(7, signal.SIGUSR1), now=0.0) == []  # only the steps get it
    assert m.handle(Signalled(7, signal.SIGUSR1, batch_only=True), now=0.0) == [
        Signal(7, (signal.SIGUSR1,), batch_only=True)
    ]
    assert m.handle(Signalled(7, signal.SIGUSR2, full=True), now=0.0) == [
        Signal(7, (signal.SIGUSR2,))
    ]
    m.handle(Launch(request(run=1)), now=0.0)  # a newer run queued ...
    # SIGTERM again (as for any stop), the kill already armed is not armed again
    assert acts(m.handle(Shutdown(5.0), now=0.0)) == [Signal(7, TERM)]
    ended(m, 7, -15)
    assert m.handle(CleanedUp(7, 0), now=1.0) == []  # nothing new on a node going down


def test_a_cancel_while_it_is_being_started_reaches_it_once_it_runs() -> None:
    m = machine()
    m.handle(Launch(request(kill_wait_s=0.5)), now=0.0)
    m.handle(Cancel(7, 0.5), now=0.0)
    assert m.handle(KillDue(7, 0), now=0.5) == [Signal(7, KILL)]  # nothing runs yet
    assert m.handle(Spawned(7, 0), now=0.6) == [SaveRecord(7), Signal(7, TERM), Signal(7, KILL)]


def test_noded_failing_a_run_ends_it() -> None:
    m = machine()
    running(m, request())
    done = m.handle(Broke(7, 0), now=1.0)
    assert acts(done)[0] == Signal(7, KILL) and acts(done)[-1] == CleanUp(7)
    (failed,) = reports(done)
    assert (failed.kind, failed.detail) == (
        Update.KIND_LAUNCH_FAILED,
        "noded internal error (see its log)",
    )
    assert m.handle(Broke(7, 0), now=1.0) == []  # already being cleaned up


def test_an_event_out_of_its_phase_is_a_bug() -> None:
    m = machine(prolog=True)
    m.handle(Launch(request()), now=0.0)
    with pytest.raises(InvalidTransition, match="Exited in phase prolog"):
        m.handle(Exited(7, 0, 0), now=0.0)


def test_what_a_new_noded_found_is_reported_lost() -> None:
    (lost,) = reports(machine().handle(FoundLost(4, 2), now=9.0))
    assert (lost.job_id, lost.restart_count, lost.end_reason, lost.exit_signal, lost.time) == (
        4,
        2,
        Update.END_NODE_FAIL,
        signal.SIGKILL,
        9.0,
    )


def test_an_epilog_failure_drains_the_node_and_still_reports() -> None:
    m = machine(epilog=True)
    running(m, request())
    ended(m, 7, 0)
    done = acts(m.handle(EpilogDone(7, 0, "exit 2"), now=3.0))
    assert done[0] == Drain("Epilog error", "exit 2") and done[-1] == CleanUp(7)
    assert [u.kind for u in reports(done)] == [Update.KIND_EXITED]


def test_the_machines_are_pure() -> None:
    """They decide; they never do: no process, file, socket or clock (dask's rule)."""
    allowed = {"__future__", "collections", "dataclasses", "signal", "typing", "corral", "noded"}
    pure = {
        "noded.core.events",
        "noded.core.jobrun",
        "noded.core.machine",
        "noded.core.samplerules",
    }
    pure |= {"noded.core.stall", "noded.core.stepmachine"}
    # noded/core/ is the machines' folder: a module put there is held to this rule too
    held = {f"noded.core.{p.stem}" for p in (SRC / "core").glob("*.py") if p.stem != "__init__"}
    assert held == pure
    for name in pure:
        tree = ast.parse((SRC / "core" / f"{name.rpartition('.')[2]}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "noded.core":
                names = [f"noded.core.{a.name}" for a in node.names]  # import stall
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            for imported in names:
                top = imported.split(".")[0]
                assert top in allowed, f"{name} imports {imported}"
                if top == "noded":
                    assert imported in pure, f"{name} imports {imported}"
                if top == "corral":
                    assert imported in (
                        "corral.errors",
                        "corral.jobspec",
                        "corral.jobsyntax",
                        "corral.wire",
                    )
