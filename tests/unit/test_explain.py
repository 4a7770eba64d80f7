"""corral why: explanations computed on a snapshot, and their wording."""

from __future__ import annotations

import dataclasses

import pytest

from client.why import explain_text
from client.why import main_args as why_main
from corral.errors import InvalidOption
from ctld.planning.explain import explain, history_ratios
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    ReservationView,
    RunningView,
    Settings,
    Snapshot,
)
from ctld.sched.model import AssocLimit, LimitSet, TresLimit


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


# ---------------------------------------------------------------- issue 22: corral why


def test_a_change_is_offered_only_when_it_is_really_sooner() -> None:
    # By limits (predict off). Job 5 waits in p for n1 (job 9: its limit ends at 1000,
    # likely at 500 by history). In q, n2 frees at 800 by its limit (job 8 started at
    # 700 with 100 s), likely at 750: later than 500, so "-p q" is not sooner, though
    # the plan says 800 < 1000.
    def snap(q_start: float, q_end: float) -> Snapshot:
        return Snapshot(
            version=1,
            now=0.0,
            nodes=(_node("n1", 0), _node("n2", 0)),
            partitions=(PartitionView("p", ("n1",)), PartitionView("q", ("n2",))),
            pending=(JobRequest(5, ("p",), gpus_per_node=8, time_limit_s=7200),),
            running=(
                RunningView(9, 1000.0, (Placement("n1", 1, 0, tuple(range(8))),)),
                RunningView(8, q_end, (Placement("n2", 1, 0, tuple(range(8))),)),
            ),
            settings=Settings(predict=False),
        )

    ratios = history_ratios([(50.0, 100.0)] * 3)
    starts = {9: 0.0}
    out = explain(snap(700.0, 800.0), 5, ratios, lambda j: starts.get(j, 700.0), ["p", "q"])
    assert out is not None and out.likely_start == 500.0
    assert out.alternatives == ()  # the plan's 800 < 1000, but likely 750 > 500
    # q frees at 300 by its limit, likely at 250: really sooner, offered at its likely start
    out = explain(snap(200.0, 300.0), 5, ratios, lambda j: starts.get(j, 200.0), ["p", "q"])
    assert out is not None
    assert [(a.change, a.start, a.now) for a in out.alternatives] == [("-p q", 250.0, False)]


def test_a_job_that_fits_now_is_offered_no_change() -> None:
    # the snapshot moved since the last pass (n2 freed): the next pass starts it as it is
    snap = dataclasses.replace(
        SNAP,
        pending=(JobRequest(5, ("p",), gpus_per_node=8, time_limit_s=7200),),
    )
    out = explain(snap, 5, [], lambda job: 0.0, ["p", "q"])
    assert out is not None and out.alternatives == ()  # it starts at once as it is
    assert out.starts_now


def test_without_a_forecast_only_a_start_at_once_is_sooner() -> None:
    # alice's GrpTRES (12 GPUs) holds job 5 (8 GPUs: 8 + 8 > 12): no forecast, its
    # start is unknown. Half the GPUs fit the limit but not the nodes before 500: no
    # proof of sooner, not offered. A 12-hour limit (over the partition's 10 hours)
    # can never start as is: any start is sooner.
    alice = {"user": "alice", "account": "lab"}
    limits = LimitSet(assocs=(AssocLimit("lab/alice", "lab/", grp=TresLimit(gpus=12)),))
    snap = Snapshot(
        version=1,
        now=0.0,
        nodes=(_node("n1", 0), _node("n2", 0)),
        partitions=(PartitionView("p", ("n1", "n2")),),
        pending=(JobRequest(5, ("p",), gpus_per_node=8, time_limit_s=7200, **alice),),
        running=(
            RunningView(9, 1000.0, (Placement("n1", 1, 0, tuple(range(8))),), **alice),
            RunningView(8, 500.0, (Placement("n2", 1, 0, tuple(range(8))),), user="bob"),
        ),
        limits=limits,
    )
    out = explain(snap, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and out.reason == "AssocGrpGRES" and out.forecast is None
    assert out.alternatives == ()
    capped = dataclasses.replace(
        snap,
        partitions=(PartitionView("p", ("n1", "n2"), max_time_s=36000),),
        pending=(JobRequest(5, ("p",), gpus_per_node=4, time_limit_s=43200, **alice),),
    )
    out = explain(capped, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and out.reason == "PartitionTimeLimit"
    assert [a.change for a in out.alternatives][:1] == ["-t 6:00:00"]


def test_a_reservation_in_the_way_is_named() -> None:
    # both nodes free, but reserved from 100 to 5000: a 2-hour job cannot finish before
    # the reservation begins, so it waits for its end; one on nodes it cannot use, or
    # that it does not wait for, is not named
    snap = Snapshot(
        version=1,
        now=0.0,
        nodes=(_node("n1", 8), _node("n2", 8), _node("n3", 8)),
        partitions=(PartitionView("p", ("n1", "n2")), PartitionView("r", ("n3",))),
        pending=(JobRequest(5, ("p",), nodes_min=2, gpus_per_node=8, time_limit_s=7200),),
        reservations=(
            ReservationView("maint", 100.0, 5000.0, ("n1", "n2"), flags=("MAINT",)),
            ReservationView("other", 100.0, 5000.0, ("n3",)),
            ReservationView("later", 20000.0, 20100.0, ("n1",)),
        ),
    )
    out = explain(snap, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and out.forecast is not None and out.forecast.start == 5000.0
    assert [r.name for r in out.reservations] == ["maint"]
    assert out.blockers == ()  # no running job holds it up: the reservation does


def test_its_own_reservation_is_named_while_it_waits_for_it() -> None:
    snap = Snapshot(
        version=1,
        now=0.0,
        nodes=(_node("n1", 8),),
        partitions=(PartitionView("p", ("n1",)),),
        pending=(JobRequest(5, ("p",), gpus_per_node=8, time_limit_s=60, reservation="mine"),),
        reservations=(ReservationView("mine", 300.0, 900.0, ("n1",), users=("alice",)),),
    )
    out = explain(snap, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and out.reason == "Reservation"
    assert [r.name for r in out.reservations] == ["mine"]


def test_the_words_follow_predictions_and_name_reservations() -> None:
    reply = {
        "now": 0,
        "job": {
            "jobId": "5",
            "state": "JOB_STATE_PENDING",
            "reason": "Resources",
            "spec": {"name": "train"},
        },
        "forecastStart": 5000,
        "likelyStart": 5000,
        "earliestStart": 5000,
        "historyRatio": 0.5,
        "historyJobs": 4,
        "predicted": True,
        "reservations": [
            {"name": "maint", "nodes": "n[1-2]", "startTime": 100, "endTime": 5000},
        ],
    }
    text = explain_text(reply)
    assert "whole time limit" not in text and "Recent jobs used" not in text
    assert "planned with the run times predicted" in text
    assert "Reservation maint holds n[1-2] from " in text
    assert "without it, it would start sooner" in text
    by_limits = explain_text({**reply, "predicted": False})
    assert "if every running job uses its whole time limit" in by_limits
    assert "Recent jobs used 50% of their limits (median of 4)" in by_limits
    now = explain_text({**reply, "now": 1000, "forecastStart": 1000, "reservations": []})
    assert "It fits now: the next scheduling pass should start it." in now


def test_explain_reports_whether_the_plan_is_predicted() -> None:
    predicted = dataclasses.replace(SNAP, settings=Settings(predict=True))
    out = explain(predicted, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and out.predicted
    out = explain(SNAP, 5, [], lambda job: 0.0, ["p"])
    assert out is not None and not out.predicted


def test_why_help_prints_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        why_main(["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: corral why [-h] JOBID")
    with pytest.raises(InvalidOption, match="usage: corral why JOBID"):
        why_main([])
