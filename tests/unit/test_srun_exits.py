"""srun's rules for its tasks' exits (client/srun_exits.py), as Slurm's srun applies
them: the exit code, --kill-on-bad-exit, --wait, and what is said."""

from __future__ import annotations

import pytest

from client.srun_exits import TaskExits


def make(ntasks: int, **cli: str) -> tuple[TaskExits, list[str]]:
    kills: list[str] = []
    return TaskExits(ntasks, dict(cli), "StepId=7.0", lambda: kills.append("kill")), kills


def test_the_exit_code_is_the_worst_and_a_signal_is_128_plus_it() -> None:
    tasks, _ = make(3)
    tasks.record(0, 0, 0)
    tasks.record(1, 3, 0)
    assert tasks.result() == (3, 0)
    tasks.record(2, 0, 9)
    assert tasks.result() == (137, 9)
    assert tasks.completed_code(1) == 3  # CompleteStep: the codes of those that exited


def test_a_task_that_never_reported_makes_the_step_fail() -> None:
    tasks, _ = make(2)
    tasks.record(0, 0, 0)
    assert tasks.result() == (1, 0)
    tasks.lost([1])
    assert tasks.exits[1] == (1, 0)
    tasks.lost([0])  # a lost node does not overwrite an exit already in
    assert tasks.exits[0] == (0, 0)


def test_kill_on_bad_exit_kills_once_and_silences_the_killed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tasks, kills = make(2, kill_on_bad_exit="1")
    tasks.record(0, 2, 0)
    tasks.judge("n1", 0, 2, 0)
    assert kills == ["kill"] and tasks.killed
    tasks.record(1, 0, 9)
    tasks.judge("n1", 1, 0, 9)  # the kill's own SIGKILL: not news, no second kill
    assert kills == ["kill"]
    err = capsys.readouterr().err
    assert "n1: task 0: Exited with exit code 2" in err and "Terminating StepId=7.0" in err
    assert "Killed" not in err


def test_without_kill_on_bad_exit_a_bad_exit_kills_nothing() -> None:
    tasks, kills = make(2)
    tasks.record(0, 1, 0)
    tasks.judge("n1", 0, 1, 0)
    assert kills == [] and not tasks.killed


def test_wait_sets_a_deadline_at_the_first_exit_and_kills_the_rest_past_it() -> None:
    tasks, kills = make(2, wait="5")
    tasks.record(0, 0, 0)
    tasks.judge("n1", 0, 0, 0)
    assert tasks.wait_deadline == pytest.approx(tasks.first_exit_at + 5)
    tasks.wait_expired()
    assert kills == ["kill"] and tasks.wait_deadline == 0.0


def test_a_bad_wait_value_is_named() -> None:
    tasks, _ = make(2, wait="soon")
    tasks.record(0, 0, 0)
    with pytest.raises(Exception, match="Invalid --wait value: soon"):
        tasks.judge("n1", 0, 0, 0)
