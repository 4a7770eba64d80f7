"""corral why: explanations computed on a snapshot, and their wording."""

from __future__ import annotations

import dataclasses

from client.why import explain_text
from ctld.explain import explain, history_ratios
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
)


def _node(name: str, gpus_free: int) -> NodeView:
    return NodeView(name, 8, 1000, 8, 8, 1000, tuple(range(8 - gpus_free, 8)), idle=gpus_free == 8)


SNAP = Snapshot(
    version=1,
    now=0.0,
    nodes=(_node("n1", 0), _node("n2", 8)),
    partitions=(PartitionView("p", ("n1", "n2")), PartitionView("q", ("n2",))),
    pending=(JobRequest(5, ("p",), nodes_min=2, gpus_per_node=8, time_limit_s=7200),),
    running=(RunningView(9, 1000.0, (Placement("n1", 1, 0, tuple(range(8))),)),),
)


def test_blockers_forecast_range_and_checked_alternatives() -> None:
    ratios = history_ratios(
        [(50.0, 100.0), (25.0, 100.0), (100.0, 100.0), (10.0, 100.0), (80, 100)]
    )
    out = explain(SNAP, 5, ratios, lambda job: 0.0, ["p", "q"])
    assert out is not None
    assert out.rank == 1 and out.reason == "Resources"
    assert out.forecast is not None and out.forecast.start == 1000.0
    (blocker,) = out.blockers
    assert blocker.job_id == 9 and blocker.expected_end == 1000.0
    assert blocker.likely_end == 500.0  # the median job used half of its limit
    assert out.likely_start == 500.0 and out.earliest_start == 250.0
    changes = {a.change: a for a in out.alternatives}
    assert changes["-N 1"].now  # one node is free now
    assert "-p q" not in changes  # q has one node: it could never run there as is
    assert "--gres=gpu:4 (instead of 8 per node)" not in changes  # n1 has no GPU free at all


def test_with_predictions_the_plan_is_the_likely_start() -> None:
    # the blocker is predicted to end at 300 (its limit says 1000): the plan says 300
    snap = dataclasses.replace(
        SNAP,
        running=(
            RunningView(
                9,
                1000.0,
                (Placement("n1", 1, 0, tuple(range(8))),),
                start_time=0.0,
                predicted_s=300,
            ),
        ),
        settings=Settings(predict=True),
    )
    out = explain(snap, 5, history_ratios([(50.0, 100.0)]), lambda job: 0.0, ["p"])
    assert out is not None and out.forecast is not None
    assert out.forecast.start == 300.0
    (blocker,) = out.blockers
    assert blocker.expected_end == 1000.0 and blocker.likely_end == 300.0
    assert out.likely_start == out.earliest_start == 300.0  # not corrected a second time


def test_explain_text_words_it() -> None:
    reply = {
        "now": 0,
        "job": {
            "jobId": "5",
            "state": "JOB_STATE_PENDING",
            "reason": "Resources",
            "priority": 100,
            "spec": {"name": "train"},
        },
        "rank": 1,
        "blockers": [{"jobId": "9", "user": "bob", "nodes": "n1", "expectedEnd": 1000}],
        "forecastStart": 1000,
        "likelyStart": 500,
        "earliestStart": 250,
        "historyRatio": 0.5,
        "historyJobs": 4,
        "alternatives": [{"change": "-N 1", "now": True}],
    }
    text = explain_text(reply)
    assert "Job 5 (train) is pending: the resources it asks for are busy [Resources]." in text
    assert "job 9 of bob on n1" in text
    assert "Recent jobs used 50% of their limits (median of 4)" in text
    assert "  -N 1: at once" in text


def test_a_requeued_job_says_why_its_last_run_ended() -> None:
    why = "progress stalled on node node02 rank 1 (step 4.0): no heartbeat for 31s"
    job = {
        "jobId": "4",
        "state": "JOB_STATE_RUNNING",
        "nodelist": "node01",
        "restartCount": 2,
        "events": [{"event": "requeued", "detail": why}],
    }
    text = explain_text({"now": 0, "job": job})
    assert text.splitlines() == [
        "Job 4 is not pending: it is RUNNING on node01.",
        f"Requeued 2 time(s); the last run ended: {why}.",
    ]
    assert "Requeued" not in explain_text({"now": 0, "job": {**job, "restartCount": 0}})
