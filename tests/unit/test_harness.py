"""The in-process mode of the test harness: the same helper API as LocalCluster (the
integration tests use that one), on ctld's real store and state machine."""

from __future__ import annotations

import pytest

from corral.errors import InvalidPartition, PermissionDenied
from corral.identity import Identity
from corral.testing import wait_for
from corral.testing.inprocess import InProcessCluster


def test_a_job_runs_and_ends_through_the_typed_client(inprocess_cluster: InProcessCluster) -> None:
    c = inprocess_cluster
    job_id = c.submit(name="hello")
    assert c.state(job_id) == "PENDING"
    job = c.wait_state(job_id, "RUNNING", timeout=5)  # settle() runs the scheduler
    assert [node for node, _ in c.dispatcher.launched] == [job["batchHost"]]
    c.clock.advance(7)
    c.exit(job_id, exit_code=3)
    done = c.wait_state(job_id, "FAILED", timeout=5)
    assert done["exitCode"] == 3
    assert [e["event"] for e in done["events"]] == ["submitted", "started", "exited"]


def test_errors_arrive_as_their_class(inprocess_cluster: InProcessCluster) -> None:
    c = inprocess_cluster
    with pytest.raises(InvalidPartition):
        c.submit(partitions=["nope"])
    job_id = c.submit(hold=True)
    mallory = c.client(Identity("mallory", 4242, 4242))
    out = mallory.cancel_jobs({"filter": {"jobIds": [job_id]}})["outcomes"]
    assert out[0]["error"] == PermissionDenied.__name__


def test_restart_keeps_what_was_acknowledged(inprocess_cluster: InProcessCluster) -> None:
    c = inprocess_cluster
    held = c.submit(hold=True)
    running = c.submit()
    c.wait_state(running, "RUNNING", timeout=5)
    c.restart()
    assert c.state(held) == "PENDING" and c.state(running) == "RUNNING"
    assert c.job(held)["hold"] == "HOLD_USER"


def test_wait_for_times_out_naming_what_it_waited_for() -> None:
    ticks: list[int] = []
    with pytest.raises(AssertionError, match="waiting for the moon"):
        wait_for(lambda: False, 0.05, "the moon", tick=lambda: ticks.append(1))
    assert ticks
    assert wait_for(lambda: 42, 1, "an answer") == 42
