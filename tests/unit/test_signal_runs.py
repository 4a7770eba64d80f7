"""A late signal meant for an earlier run of a requeued job never reaches the new run."""

from __future__ import annotations

from typing import Any

from noded.steps import RunningStep, StepRunner


class Recording(RunningStep):
    def __init__(self, job_id: int, step_id: int, run: int) -> None:
        super().__init__(job_id, step_id, run)
        self.got: list[int] = []

    def signal(self, sig: int) -> None:
        self.got.append(sig)


async def _verify(job_id: int, step_id: int) -> Any:
    raise AssertionError("not called")


def test_steps_take_signals_of_their_own_run_only() -> None:
    runner = StepRunner("n1", "corral-test-{job_id}", _verify)
    old, new = Recording(7, 0, run=0), Recording(7, 1, run=1)
    runner.steps = {(7, 0): old, (7, 1): new}
    assert runner.signal(7, None, 10, run=0)
    assert (old.got, new.got) == ([10], [])
    assert not runner.signal(7, 1, 12, run=0)  # step 1 belongs to run 1
    assert runner.signal(7, None, 15)  # untagged (an older ctld): every run
    assert (old.got, new.got) == ([10, 15], [15])
