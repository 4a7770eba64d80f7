"""noded's step machine, fed events and read for actions: a step's tasks on one node."""

from __future__ import annotations

import signal

import pytest

from corral.wire import corral_pb2 as pb
from noded.core.events import Log, Report
from noded.core.stepmachine import (
    STALL_KILL_S,
    KillAfter,
    SignalStep,
    Silence,
    Silent,
    StepAction,
    StepGone,
    StepKillDue,
    StepMachine,
    StepOver,
    StepState,
    StepWarnDue,
    TaskExited,
    Terminate,
    warning_for,
)

pytestmark = pytest.mark.timeout(30)

Update = pb.JobStatusUpdate
TERM = SignalStep((signal.SIGCONT, signal.SIGTERM))
KILL = SignalStep((signal.SIGKILL,))


def acts(actions: list[StepAction]) -> list[StepAction]:
    return [a for a in actions if not isinstance(a, Log)]


def test_the_step_end_report_takes_the_highest_code_else_the_first_signal() -> None:
    m, step = StepMachine("n2"), StepState(7, 1)
    for rank, rc in ((0, 0), (1, 3), (2, 1)):
        assert m.handle(step, TaskExited(rank, rc), 1.0) == []
    (report,) = m.handle(step, StepGone(3), 2.0)
    assert isinstance(report, Report)
    assert (report.update.kind, report.update.exit_code, report.update.exit_signal) == (
        Update.KIND_STEP_ENDED,
        3,
        0,
    )
    assert (report.update.job_id, report.update.step_id, report.update.time) == (7, 1, 2.0)
    step = StepState(7, 2)
    m.handle(step, TaskExited(0, -signal.SIGSEGV), 1.0)
    assert step.exits == {0: (0, signal.SIGSEGV)}
    (report,) = m.handle(step, StepGone(2), 2.0)  # rank 1 never ended: killed at the end
    assert isinstance(report, Report) and report.update.exit_signal == signal.SIGSEGV
    (report,) = m.handle(StepState(7, 3), StepGone(1), 2.0)
    assert isinstance(report, Report) and report.update.exit_signal == signal.SIGKILL


def test_the_job_ending_terminates_once_and_kills_after_the_grace() -> None:
    m, step = StepMachine("n2"), StepState(7, 0)
    assert m.handle(step, Terminate(30.0), 0.0) == [TERM, KillAfter(30.0)]
    assert m.handle(step, Terminate(0.0), 0.0) == [TERM]  # its kill is armed already
    assert m.handle(step, StepKillDue(), 30.0) == [KILL]
    assert m.handle(step, StepOver(), 31.0) == [KILL]  # nothing of it may stay


def test_nothing_outlives_the_steps_end() -> None:
    """ctld's terminate while the end reaps the step (the runner still holds it) arms
    no kill timer: the end cancelled the step's timers, and a new one would fire once
    the step is gone; its silence is no stall; once gone, nothing is signalled."""
    m, step = StepMachine("n2"), StepState(7, 0, stall_timeout_s=5.0)
    assert m.handle(step, StepOver(), 1.0) == [KILL]
    assert m.handle(step, Terminate(30.0), 2.0) == []
    assert m.handle(step, Silent((Silence(0, 60.0),)), 3.0) == []
    (report,) = m.handle(step, StepGone(1), 4.0)
    assert isinstance(report, Report) and report.update.kind == Update.KIND_STEP_ENDED
    assert m.handle(step, StepKillDue(), 40.0) == []  # a timer of before: the pids are not its
    assert m.handle(step, Terminate(0.0), 41.0) == []


def test_the_most_silent_idle_rank_is_named_once() -> None:
    m, step = StepMachine("node02"), StepState(7, 0, run=2, stall_timeout_s=5.0)
    assert step.watched() and not step.could_stall(4.0) and step.could_stall(5.0)
    busy = Silence(0, 100.0, gpus_busy=True)  # slow, not hung
    assert m.handle(step, Silent((busy,)), 1000.0) == []
    actions = m.handle(step, Silent((busy, Silence(2, 6.0), Silence(3, 14.0))), 1000.0)
    assert acts(actions)[1:] == [TERM, KillAfter(STALL_KILL_S)]
    report = acts(actions)[0]
    assert isinstance(report, Report)
    detail = "progress stalled on node node02 rank 3 (step 7.0): no heartbeat for 14s"
    assert (report.update.end_reason, report.update.restart_count, report.update.detail) == (
        Update.END_STALLED,
        2,
        detail,
    )
    assert step.stall == detail and not step.watched()
    assert m.handle(step, Silent((Silence(2, 60.0),)), 1010.0) == []  # reported once


def test_signals_are_for_their_own_run_and_the_warning_for_the_steps() -> None:
    step = StepState(7, 1, run=1)
    assert step.takes(7, None, None) and step.takes(7, 1, 1) and step.takes(7, None, 1)
    assert not step.takes(7, 1, 0) and not step.takes(7, 2, None) and not step.takes(8, 1, 1)
    m = StepMachine("n2")
    assert acts(m.handle(step, StepWarnDue(signal.SIGUSR1), 0.0)) == [SignalStep((signal.SIGUSR1,))]
    job = pb.Job(time_limit_s=600, start_time=1000.0, spec=pb.JobSpec(signal="USR1@120"))
    assert warning_for(job, 1000.0) == (480.0, signal.SIGUSR1)
    assert warning_for(job, 1480.0) is None  # a step started after the warning
    job.spec.signal = "B:USR1@120"
    assert warning_for(job, 1000.0) is None  # the batch shell's only
    job.spec.signal = "NOPE"
    assert warning_for(job, 1000.0) is None
