"""noded's step machine (noded/core/stepmachine.py) as a Hypothesis state machine: a step's
events in the orders the step runner (steps.py) can deliver them (task exits while its
pipes are watched, the monitor's silences, ctld's terminate until the step is gone,
the --signal warning and the kill timer until the end cancels them, the end, every
process gone), checked at every step:

- nothing is signalled once every process of the step is gone (a timer armed after
  the end cancelled the step's timers would outlive it: its SIGKILL would reach
  whatever process took a pid of the step's);
- exactly one end report (KIND_STEP_ENDED), when every process is gone: the highest
  exit code of its tasks, else the first signal, SIGKILL for a task never seen ending;
- at most one stall report, naming a task that could be stalled, and none once the
  step's end began (its silence is the end's); one kill timer at most.
"""

from __future__ import annotations

import signal

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from corral.wire import corral_pb2 as pb
from noded.core.events import Report
from noded.core.stepmachine import (
    KillAfter,
    SignalStep,
    Silence,
    Silent,
    StepAction,
    StepEvent,
    StepGone,
    StepKillDue,
    StepMachine,
    StepOver,
    StepState,
    StepWarnDue,
    TaskExited,
    Terminate,
    exit_of,
)

Update = pb.JobStatusUpdate
RCS = (0, 3, 7, -int(signal.SIGKILL), -int(signal.SIGTERM))


class StepMachineProps(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = StepMachine("n1")
        self.step = StepState(7, 0)
        self.tasks = 1
        self.now = 0.0
        self.watching = True  # its pipes are read: task exits come in (until the end)
        self.warning_armed = False  # the --signal warning's timer
        self.kill_armed = False  # a kill timer that may still fire
        self.over = False
        self.gone = False
        self.ended: list[pb.JobStatusUpdate] = []
        self.stalls: list[pb.JobStatusUpdate] = []
        self.kill_timers = 0
        self.exits: dict[int, tuple[int, int]] = {}

    @initialize(
        tasks=st.integers(1, 3),
        stall_timeout_s=st.sampled_from((0.0, 30.0)),
        warned=st.booleans(),
    )
    def start(self, tasks: int, stall_timeout_s: float, warned: bool) -> None:
        self.tasks = tasks
        self.step = StepState(7, 0, run=1, stall_timeout_s=stall_timeout_s)
        self.warning_armed = warned

    def feed(self, event: StepEvent) -> list[StepAction]:
        self.now += 1.0
        actions = self.machine.handle(self.step, event, self.now)
        for action in actions:
            match action:
                case SignalStep(signals):
                    assert not self.gone, f"{signals} sent after every process was gone"
                case KillAfter():
                    assert not self.gone, "a kill timer armed for a step that is gone"
                    self.kill_timers += 1
                    assert self.kill_timers == 1, "a second kill timer"
                    self.kill_armed = True
                case Report(update) if update.kind == Update.KIND_STEP_ENDED:
                    assert isinstance(event, StepGone), f"an end report at {event!r}"
                    self.ended.append(update)
                case Report(update):
                    assert not self.over, "a stall reported once the step's end began"
                    assert update.end_reason == Update.END_STALLED
                    assert update.restart_count == 1  # the run it belongs to
                    self.stalls.append(update)
        return actions

    # ------------------------------------------------------------ while its pipes are read

    @precondition(lambda self: self.watching and len(self.exits) < self.tasks)
    @rule(data=st.data(), rc=st.sampled_from(RCS))
    def task_exits(self, data: st.DataObject, rc: int) -> None:
        rank = data.draw(st.sampled_from([r for r in range(self.tasks) if r not in self.exits]))
        self.exits[rank] = exit_of(rc)
        self.feed(TaskExited(rank, rc))

    @precondition(lambda self: self.warning_armed)
    @rule()
    def warning_due(self) -> None:
        self.warning_armed = False
        self.feed(StepWarnDue(int(signal.SIGUSR1)))

    # ------------------------------------------------------------ until it is gone

    @precondition(lambda self: not self.gone)
    @rule(
        silent_s=st.lists(st.sampled_from((5.0, 31.0, 90.0)), min_size=1, max_size=3),
        busy=st.booleans(),
    )
    def silent(self, silent_s: list[float], busy: bool) -> None:
        live = [r for r in range(self.tasks) if r not in self.exits]
        tasks = tuple(Silence(rank, s, busy) for rank, s in zip(live, silent_s, strict=False))
        reports = len(self.stalls)
        self.feed(Silent(tasks))
        if len(self.stalls) > reports:
            named = self.stalls[-1].detail
            assert any(f"rank {t.rank} " in named for t in tasks if self.step.stall_timeout_s)

    @precondition(lambda self: not self.gone)
    @rule(kill_wait_s=st.sampled_from((0.0, 5.0)))
    def terminate(self, kill_wait_s: float) -> None:
        """ctld ends the job: the runner hands it to each step it still holds."""
        self.feed(Terminate(kill_wait_s))

    @precondition(lambda self: self.kill_armed)
    @rule()
    def kill_due(self) -> None:
        """The kill timer fires: whenever it is armed and was not cancelled, gone or not."""
        self.kill_armed = False
        self.feed(StepKillDue())

    # ------------------------------------------------------------ its end

    @precondition(lambda self: not self.over)
    @rule()
    def over(self) -> None:
        """steps.end: its timers cancelled, its pipes no longer read, StepOver."""
        self.watching = False
        self.warning_armed = False
        self.kill_armed = False
        self.over = True
        self.feed(StepOver())

    @precondition(lambda self: self.over and not self.gone)
    @rule()
    def gone(self) -> None:
        self.gone = True
        self.feed(StepGone(self.tasks))
        (report,) = self.ended
        codes = [c for c, sig in self.exits.values() if not sig]
        signals = [sig for _, sig in self.exits.values() if sig]
        unseen = int(signal.SIGKILL) if len(self.exits) < self.tasks else 0
        assert report.exit_code == max(codes, default=0)
        assert report.exit_signal == (signals[0] if signals else unseen)

    @rule()
    def time_passes(self) -> None:
        """Nothing happens (once the step is gone, only a kill timer it left could)."""
        self.now += 1.0

    # ------------------------------------------------------------ throughout

    @invariant()
    def one_end_report_once_gone(self) -> None:
        assert len(self.ended) == (1 if self.gone else 0)

    @invariant()
    def one_stall_report_at_most(self) -> None:
        assert len(self.stalls) <= 1


StepMachineProps.TestCase.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None
)
test_step_machine_properties = StepMachineProps.TestCase
