"""srun's rules for a step's tasks' exits, as Slurm's srun applies them: what it says of
each bad exit, --kill-on-bad-exit, --wait (the others' time after the first exit), the
step's exit code and signal, and Ctrl-C's count of running and exited tasks. No stream
or process here: the step (srun_step.py) feeds the exits in and kills when told."""

from __future__ import annotations

import time

from client import srun_terminal
from client.alloc import say
from corral import signals
from corral.errors import InvalidOption

TYPE_CHECKING = False  # typing costs start-up time; srun is about start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

PROG = "srun"


class TaskExits:
    def __init__(
        self, ntasks: int, cli: dict[str, Any], name: str, kill_all: Callable[[], None]
    ) -> None:
        self.ntasks, self.cli, self.name = ntasks, cli, name
        self._kill = kill_all
        self.exits: dict[int, tuple[int, int]] = {}  # rank -> (code, signal)
        self.killed = False  # srun killed the step: its tasks' signals are not news
        self.first_exit_at = 0.0
        self.wait_deadline = 0.0  # --wait: the others must be done by then

    def kill_all(self) -> None:
        self.killed = True
        self._kill()

    def all_in(self, ranks: Iterable[int]) -> bool:
        return all(r in self.exits for r in ranks)

    def record(self, rank: int, code: int, sig: int) -> None:
        """A task's exit (the first report of it: a resumed stream may say it again)."""
        self.exits[rank] = (code, sig)

    def judge(self, node: str, rank: int, code: int, sig: int) -> None:
        """What a recorded exit means: said if bad, the step killed with
        --kill-on-bad-exit, --wait's deadline set by the first."""
        self._report(node, rank, code, sig)
        bad = code or sig
        if bad and self.cli.get("kill_on_bad_exit") not in (None, "0") and not self.killed:
            say(PROG, f"Terminating {self.name}")
            self.kill_all()
        wait = self.cli.get("wait")
        if wait and not self.first_exit_at and len(self.exits) < self.ntasks:
            self.first_exit_at = time.monotonic()
            try:
                seconds = float(wait)
            except ValueError:
                raise InvalidOption(f"Invalid --wait value: {wait}") from None
            if seconds > 0:
                self.wait_deadline = self.first_exit_at + seconds

    def lost(self, ranks: Iterable[int]) -> None:
        """Tasks whose node went away before their exits came: failed (1)."""
        for rank in ranks:
            self.exits.setdefault(rank, (1, 0))

    def wait_expired(self) -> None:
        self.wait_deadline = 0.0
        if len(self.exits) < self.ntasks:
            say(PROG, "error: Timed out waiting for job step to complete")
            self.kill_all()

    def status(self, ranks: Iterable[int]) -> None:
        """Ctrl-C once: which tasks run and which exited."""
        running = sorted(r for r in ranks if r not in self.exits)
        done = sorted(self.exits)
        if running:
            say(PROG, f"{self.name} tasks {srun_terminal.ranges(running)}: running")
        if done:
            say(PROG, f"{self.name} tasks {srun_terminal.ranges(done)}: exited")

    def result(self) -> tuple[int, int]:
        """srun's exit: the highest code, 128+N for a signal (the first signal kept), 1 if
        a task never reported."""
        code, first_signal = 0, 0
        for exit_code, exit_signal in self.exits.values():
            if exit_signal:
                first_signal = first_signal or exit_signal
                code = max(code, 128 + exit_signal)
            else:
                code = max(code, exit_code)
        if len(self.exits) < self.ntasks:
            code = max(code, 1)
        return code, first_signal

    def completed_code(self, default: int) -> int:
        """The code CompleteStep reports: the worst of the tasks that exited (a signal's
        is in the signal)."""
        codes = [c for c, sig in self.exits.values() if not sig]
        return max(codes, default=default)

    def _report(self, node: str, rank: int, code: int, sig: int) -> None:
        if sig:
            how = signals.name(sig).removeprefix("SIG").capitalize()
            how = {"Kill": "Killed", "Term": "Terminated", "Int": "Interrupt"}.get(how, how)
            if not self.killed:
                say(PROG, f"error: {node}: task {rank}: {how}")
        elif code:
            say(PROG, f"error: {node}: task {rank}: Exited with exit code {code}")
