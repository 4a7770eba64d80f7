"""Power saving in the simulator (ctld/sim/power.py, issue 27): idle nodes power down
after suspend_time, a job that needs them waits for their resume_timeout, and the
figures (node-seconds off, nodes woken) add up on a trace small enough to follow."""

from __future__ import annotations

import pytest

from ctld.sim.engine import replay
from ctld.sim.power import PowerSettings
from ctld.sim.swf import TraceJob


def job(job_id: int, submit: float, run: float, procs: int) -> TraceJob:
    return TraceJob(job_id, submit, run, procs, estimate=run, user=1)


def test_never_suspending_changes_nothing() -> None:
    jobs = (job(1, 0, 100, 2), job(2, 10, 50, 4), job(3, 20, 30, 1))
    base = replay(jobs, 4, "easy")
    same = replay(jobs, 4, "easy", power=PowerSettings(suspend_time_s=1e9))
    assert [(o.start, o.end) for o in base.outcomes] == [(o.start, o.end) for o in same.outcomes]
    assert same.power is not None and same.power.off_seconds == 0


def test_a_job_after_a_long_idle_waits_for_the_boot() -> None:
    # 4 nodes; one job at 0 runs 100 s; the next arrives at 10,000 s, long after
    # suspend_time: every node is off then, and it waits resume_timeout
    jobs = (job(1, 0, 100, 2), job(2, 10_000, 50, 3))
    settings = PowerSettings(suspend_time_s=600, resume_timeout_s=300, suspend_timeout_s=60)
    result = replay(jobs, 4, "easy", power=settings)
    second = next(o for o in result.outcomes if o.job.job_id == 2)
    assert second.start == pytest.approx(10_300)  # its resume_timeout
    pool = result.power
    assert pool is not None and pool.resumes == 3 and pool.suspends >= 4
    # nodes 3-4 off from 660 s (idle since 0), nodes 1-2 from 760 s (idle since 100),
    # all four until 10,000 s; then the one not woken stays off to the end (10,350 s)
    expected = 2 * (10_000 - 660) + 2 * (10_000 - 760) + (10_350 - 10_000)
    assert pool.off_seconds == pytest.approx(expected)
