"""QoS preemption through ctld (in process: real store and state machine, manual clock):
the victim's signals, its grace time, requeue or PREEMPTED, the claim for the preemptor."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

from corral.errors import InvalidRequest
from corral.testing.inprocess import InProcessCluster
from corral.wire import corral_pb2 as pb

QOS = """
[scheduler]
preempt_mode = "{mode}"

[[qos]]
name = "low"
grace_time = 30
{low_mode}

[[qos]]
name = "high"
priority = 100
preempt = ["low"]
"""


def make(
    factory: Callable[..., InProcessCluster], mode: str = "requeue", low_mode: str = ""
) -> InProcessCluster:
    extra = QOS.format(mode=mode, low_mode=f'preempt_mode = "{low_mode}"' if low_mode else "")
    return factory(nodes=1, gpus_per_node=4, cpus_per_node=8, extra_config=extra)


def later(c: InProcessCluster, seconds: float) -> None:
    """Time passes with the nodes alive, and the scheduler runs."""
    c.clock.advance(seconds)
    c.heartbeat()
    c.tick(0)
    c.settle()


def signals(c: InProcessCluster, job_id: str) -> list[tuple[int, bool]]:
    return [(r.signal, r.terminate) for _, r in c.dispatcher.signalled if r.job_id == int(job_id)]


def test_requeue_after_grace_time_and_the_preemptor_gets_the_gpus(inprocess_factory: Any) -> None:
    c = make(inprocess_factory)
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600", requeue=True)
    c.wait_state(low, "RUNNING", timeout=5)
    later(c, 10)
    high = c.submit(qos="high", gpusPerNode=4, timeLimitS="600")
    c.settle()
    assert c.state(high) == "PENDING" and c.state(low) == "RUNNING"
    # the notice now: SIGTERM to the whole job, no terminate before the grace time
    assert signals(c, low) == [(signal.SIGTERM, False)]
    story = c.job(low)["events"][-1]
    assert story["event"] == "signalled" and f"preempted by job {high}" in story["detail"]
    assert c.job(high)["waitsFor"] == [low]
    # a normal job submitted meanwhile does not take what is being freed for high
    other = c.submit(gpusPerNode=4, timeLimitS="60")
    later(c, 29)
    assert signals(c, low) == [(signal.SIGTERM, False)]
    later(c, 1)  # grace time over: the terminate (SIGTERM, SIGKILL after KillWait)
    c.settle()
    assert signals(c, low)[-1] == (signal.SIGTERM, True)
    c.exit(low, exit_signal=15)
    assert c.state(low) == "PENDING"
    job = c.job(low)
    assert job["restartCount"] == 1
    c.settle()
    assert c.state(high) == "RUNNING" and c.state(other) == "PENDING"
    assert c.state(low) == "PENDING"
    # the preempted run is recorded PREEMPTED (what sacct -D shows), with why
    (run,) = c.cluster.store.earlier_runs([int(low)])
    assert run.state == pb.JOB_STATE_PREEMPTED and run.reason == f"preempted by job {high}"
    assert run.exit_signal == 15 and run.restart_count == 0


def test_a_job_that_ends_on_the_notice_is_requeued_too(inprocess_factory: Any) -> None:
    c = make(inprocess_factory)
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600")
    c.wait_state(low, "RUNNING", timeout=5)
    high = c.submit(qos="high", gpusPerNode=4, timeLimitS="600")
    c.settle()
    c.exit(low, exit_code=0)  # it saved a checkpoint and left at once
    assert c.state(low) == "PENDING"
    c.settle()
    assert c.state(high) == "RUNNING"
    later(c, 60)  # its grace timer finds nothing to do
    assert not any(term for _, term in signals(c, low))


@pytest.mark.parametrize(
    ("mode", "low_mode", "spec"),
    [
        ("cancel", "", {}),  # the cluster's mode
        ("requeue", "cancel", {}),  # the QOS's own mode
        ("requeue", "", {"noRequeue": True}),  # a job that may not be requeued ends
    ],
)
def test_cancel_mode_ends_the_job_preempted(
    inprocess_factory: Any, mode: str, low_mode: str, spec: dict[str, Any]
) -> None:
    c = make(inprocess_factory, mode, low_mode)
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600", **spec)
    c.wait_state(low, "RUNNING", timeout=5)
    high = c.submit(qos="high", gpusPerNode=4, timeLimitS="600")
    c.settle()
    later(c, 30)
    c.exit(low, exit_signal=15)
    done = c.job(low)
    assert done["state"] == "JOB_STATE_PREEMPTED"
    assert done["events"][-1]["detail"] == f"preempted by job {high}"
    c.settle()
    assert c.state(high) == "RUNNING"


def test_the_jobs_own_signal_comes_first(inprocess_factory: Any) -> None:
    c = make(inprocess_factory)
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600", signal="B:USR1@60")
    c.wait_state(low, "RUNNING", timeout=5)
    c.submit(qos="high", gpusPerNode=4, timeLimitS="600")
    c.settle()
    sent = [r for _, r in c.dispatcher.signalled if r.job_id == int(low)]
    assert [(r.signal, r.batch_only, r.terminate) for r in sent] == [(signal.SIGUSR1, True, False)]


def test_off_by_default_and_not_for_a_qos_that_may_not(inprocess_factory: Any) -> None:
    c = make(inprocess_factory, mode="off")
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600")
    c.wait_state(low, "RUNNING", timeout=5)
    high = c.submit(qos="high", gpusPerNode=4, timeLimitS="600")
    c.settle()
    assert signals(c, low) == [] and c.job(high)["reason"] == "Resources"
    c2 = make(inprocess_factory)
    low2 = c2.submit(qos="low", gpusPerNode=4, timeLimitS="3600")
    c2.wait_state(low2, "RUNNING", timeout=5)
    c2.submit(gpusPerNode=4, timeLimitS="600")  # normal QOS preempts nothing
    c2.settle()
    assert signals(c2, low2) == []


def test_a_qos_made_with_sacctmgr_preempts_and_loops_are_refused(inprocess_factory: Any) -> None:
    extra = '[scheduler]\npreempt_mode = "requeue"\n\n[[qos]]\nname = "low"\n'
    c = inprocess_factory(nodes=1, gpus_per_node=4, cpus_per_node=8, extra_config=extra)
    api = c.client()
    api.sacctmgr({"action": "add", "entity": "qos", "args": ["urgent", "Preempt=low"]})
    low = c.submit(qos="low", gpusPerNode=4, timeLimitS="3600")
    c.wait_state(low, "RUNNING", timeout=5)
    urgent = c.submit(qos="urgent", gpusPerNode=4, timeLimitS="600")
    c.settle()
    assert c.job(urgent)["waitsFor"] == [low]
    assert signals(c, low) == [(signal.SIGTERM, True)]  # no grace time: at once
    with pytest.raises(InvalidRequest, match="QOS preemption loop: urgent -> low -> urgent"):
        api.sacctmgr(
            {"action": "modify", "entity": "qos", "args": ["low", "set", "Preempt=urgent"]}
        )
