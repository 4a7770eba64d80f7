"""Stacked forecasts: once a pass's starts are decided, each forecast holds its slot,
so the jobs behind it are forecast after it; a forecast never changes a decision."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ctld.sched import JobRequest, Settings, Snapshot, schedule
from tests.unit.test_backfill import snapshots, two_node_snap

BIG = JobRequest(1, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=1000)
SHORT = JobRequest(2, ("p",), gpus_per_node=4, time_limit_s=50)
WIDE_A = JobRequest(3, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=1000)
WIDE_B = JobRequest(4, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=1000)
SHORTEST = Settings(backfill_order="shortest")


def test_each_forecast_queues_behind_the_ones_before_it() -> None:
    flat = schedule(two_node_snap(BIG, SHORT, WIDE_A, WIDE_B, settings=SHORTEST))
    stacked = schedule(
        two_node_snap(BIG, SHORT, WIDE_A, WIDE_B, settings=replace(SHORTEST, stack_forecasts=16))
    )
    # the same decisions: SHORT backfills, BIG holds the reservation at t=100
    assert flat.starts == stacked.starts and [s.job_id for s in flat.starts] == [2]
    assert flat.reasons == stacked.reasons
    assert flat.forecasts[1] == stacked.forecasts[1] and stacked.forecasts[1].start == 100.0
    # without stacking both wide jobs are told BIG's end; stacked, one after the other
    assert flat.forecasts[3].start == flat.forecasts[4].start == 1100.0
    assert stacked.forecasts[3].start == 1100.0 and stacked.forecasts[4].start == 2100.0
    assert not stacked.forecasts[3].reserved and not stacked.forecasts[4].reserved
    # only as many forecasts hold a slot as stack_forecasts says
    one = schedule(
        two_node_snap(BIG, SHORT, WIDE_A, WIDE_B, settings=replace(SHORTEST, stack_forecasts=1))
    )
    assert one.forecasts[3].start == 1100.0 and one.forecasts[4].start == 2100.0
    none_ = schedule(
        two_node_snap(
            BIG,
            SHORT,
            WIDE_A,
            WIDE_B,
            JobRequest(5, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=1000),
            settings=replace(SHORTEST, stack_forecasts=1),
        )
    )
    assert none_.forecasts[5].start == 2100.0  # WIDE_B's forecast held nothing


def test_backfill_in_priority_order_is_not_stacked() -> None:
    # there forecasts are made while jobs still start: a hold would change decisions
    s = two_node_snap(BIG, SHORT, WIDE_A, WIDE_B, settings=Settings(stack_forecasts=16))
    plan = schedule(s)
    assert plan.forecasts[3].start == plan.forecasts[4].start == 1100.0


def test_a_held_slot_without_time_limit_leaves_the_jobs_behind_it_no_forecast() -> None:
    # BIG has no time limit and no reservation: once its forecast holds both nodes,
    # nothing after it ever starts
    endless = replace(BIG, time_limit_s=-1)
    unreserved = replace(SHORTEST, reserve_depth=0)
    flat = schedule(two_node_snap(endless, SHORT, WIDE_A, settings=unreserved))
    stacked = schedule(
        two_node_snap(endless, SHORT, WIDE_A, settings=replace(unreserved, stack_forecasts=1))
    )
    assert flat.starts == stacked.starts and flat.reasons == stacked.reasons
    assert flat.forecasts[3].start == 100.0  # flat: told BIG's start, as if BIG were not there
    assert 3 not in stacked.forecasts  # stacked: no start can be foreseen


@settings(max_examples=300, deadline=None)
@given(snapshots(), st.integers(0, 3), st.integers(1, 3))
def test_stacking_forecasts_changes_no_decision(s: Snapshot, depth: int, stack: int) -> None:
    base = replace(s, settings=replace(s.settings, forecast_depth=depth))
    flat = schedule(replace(base, settings=replace(base.settings, stack_forecasts=0)))
    stacked = schedule(replace(base, settings=replace(base.settings, stack_forecasts=stack)))
    assert flat.starts == stacked.starts
    assert flat.reasons == stacked.reasons
    assert flat.preemptions == stacked.preemptions
    # the reservations are decided before any forecast holds a slot: the same
    reserved = {j: f for j, f in flat.forecasts.items() if f.reserved}
    assert reserved == {j: f for j, f in stacked.forecasts.items() if f.reserved}
    for job_id, f in flat.forecasts.items():
        held = stacked.forecasts.get(job_id)
        # a hold only takes room away: a stacked forecast is never earlier. One pushed
        # past every end (behind a held slot with no time limit) is no forecast, and
        # forecast_depth then goes to a job after it: the sets may differ there
        assert held is None or held.start >= f.start
