"""Run-time predictions (EASY++'s rule), shortest-predicted-first backfill, and
fragmentation-aware placement in the pure core."""

from __future__ import annotations

from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    RunningView,
    Settings,
    Snapshot,
    schedule,
)
from ctld.sched.model import Demand
from ctld.sched.predict import RunTimePredictor, expected_end


def test_prediction_is_the_mean_of_the_users_last_two_runs_capped_by_the_limit() -> None:
    p = RunTimePredictor()
    assert p.predict("al", 3600) == 3600  # no history: the limit
    assert p.predict("al", -1) == 0  # no history, no limit: none
    p.observe("al", 100, 3600)
    p.observe("al", 300, 3600)
    p.observe("al", 500, 3600)  # only the last two count
    assert p.predict("al", 3600) == 400
    assert p.predict("al", 200) == 200  # never past the job's own limit
    p.observe("al", 50, 600)
    assert p.predict("al", 600) == 50  # the same limit's history first
    assert p.predict("al", 7200) == 275  # else the user's last two of any limit
    assert p.predict("bo", 60) == 60


def test_a_job_that_outlives_its_prediction_is_expected_a_step_later_never_past_its_limit() -> None:
    assert expected_end(start=0, predicted_s=100, limit_end=1000, now=50) == 100
    assert expected_end(start=0, predicted_s=100, limit_end=1000, now=100) == 300
    assert expected_end(start=0, predicted_s=100, limit_end=1000, now=400) == 900
    assert expected_end(start=0, predicted_s=100, limit_end=1000, now=950) == 1000
    assert expected_end(start=0, predicted_s=0, limit_end=1000, now=10) == 1000


def one_node(cpus_free: int = 0) -> tuple[NodeView, ...]:
    return (NodeView("n", 4, 1000, 0, cpus_free, 1000, (), idle=cpus_free == 4),)


def test_predictions_backfill_where_limits_would_not_and_say_so() -> None:
    # 2 of 4 CPUs run until t=1000 by its limit, t=100 as predicted; the top job needs
    # all 4; a 2-CPU job with a 500 s limit but a 50 s prediction fits before t=100
    running = (
        RunningView(9, 1000.0, (Placement("n", 2, 0, ()),), start_time=0.0, predicted_s=100),
    )
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=1000, predicted_s=500),
        JobRequest(2, ("p",), ntasks=2, time_limit_s=1500, predicted_s=50),
    )

    def plan(predict: bool) -> Plan:
        return schedule(
            Snapshot(
                1,
                10.0,
                one_node(2),
                (PartitionView("p", ("n",)),),
                pending,
                running,
                settings=Settings(predict=predict),
            )
        )

    by_limits = plan(False)
    assert by_limits.starts == () and by_limits.forecasts[1].start == 1000.0
    by_predictions = plan(True)
    (start,) = by_predictions.starts
    assert start.job_id == 2 and start.on_prediction
    assert by_predictions.forecasts[1].start == 100.0  # the running job's predicted end


def test_shortest_predicted_backfill_candidate_goes_first() -> None:
    # 1 CPU free now; the top job waits for all 4; two 1-CPU candidates: the shorter
    # prediction wins the free CPU though it is lower in priority
    running = (RunningView(9, 100.0, (Placement("n", 3, 0, ()),)),)
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=100),
        JobRequest(2, ("p",), ntasks=1, time_limit_s=90, predicted_s=80),
        JobRequest(3, ("p",), ntasks=1, time_limit_s=90, predicted_s=10),
    )
    for order, winner in (("priority", 2), ("shortest", 3)):
        plan = schedule(
            Snapshot(
                1,
                0.0,
                one_node(1),
                (PartitionView("p", ("n",)),),
                pending,
                running,
                settings=Settings(predict=True, backfill_order=order),
            )
        )
        assert [s.job_id for s in plan.starts] == [winner]
        assert plan.forecasts[1].reserved
        assert plan.reasons[5 - winner] == "Priority"


def gpu_node(name: str, free: int) -> NodeView:
    return NodeView(name, 64, 100_000, 8, 64, 100_000, tuple(range(8 - free, 8)), idle=free == 8)


def test_frag_placement_keeps_nodes_about_to_drain_free_for_whole_node_jobs() -> None:
    # nodes a and b each run a 4-GPU job; a's ends in
    # 100 s, b's in 5000 s. A 1-GPU job expected to run 1000 s: best fit sees two equal
    # nodes and takes a (name order), which then cannot take an 8-GPU job at t=100;
    # frag puts it on b, which stays busy past its end anyway
    nodes = (gpu_node("a", 4), gpu_node("b", 4))
    running = tuple(
        RunningView(
            10 + i,
            end,
            (Placement(name, 0, 0, (0, 1, 2, 3)),),
            start_time=0.0,
            predicted_s=int(end),
        )
        for i, (name, end) in enumerate((("a", 100.0), ("b", 5000.0)))
    )
    job = (JobRequest(1, ("p",), gpus_per_node=1, time_limit_s=4000, predicted_s=1000),)
    part = (PartitionView("p", ("a", "b")),)
    for placement, node in (("pack", "a"), ("frag", "b")):
        plan = schedule(
            Snapshot(
                1,
                0.0,
                nodes,
                part,
                job,
                running,
                settings=Settings(placement=placement, predict=True),
            )
        )
        assert plan.starts[0].placements[0].node == node
    # the fewest free GPUs still comes first: a node with 2 free wins over both
    nodes3 = (*nodes, gpu_node("c", 2))
    plan = schedule(
        Snapshot(
            1,
            0.0,
            nodes3,
            (PartitionView("p", ("a", "b", "c")),),
            job,
            running,
            settings=Settings(placement="frag", predict=True),
            demands=(Demand(2),),
        )
    )
    assert plan.starts[0].placements[0].node == "c"


def test_fgd_judges_a_node_as_it_will_be_when_the_job_ends() -> None:
    # the same two nodes, 8-GPU jobs expected: ATC'23's static score sees a and b alike
    # (4 free -> 3) and takes a, which would be whole at t=100; judged at the job's
    # expected end (t=1000) a is whole then and b still half busy, so it goes to b
    nodes = (gpu_node("a", 4), gpu_node("b", 4))
    running = tuple(
        RunningView(
            10 + i,
            end,
            (Placement(name, 0, 0, (0, 1, 2, 3)),),
            start_time=0.0,
            predicted_s=int(end),
        )
        for i, (name, end) in enumerate((("a", 100.0), ("b", 5000.0)))
    )
    part = (PartitionView("p", ("a", "b")),)

    def node_of(job: JobRequest, runs: tuple[RunningView, ...]) -> str:
        snap = Snapshot(
            1,
            0.0,
            nodes,
            part,
            (job,),
            runs,
            settings=Settings(placement="fgd", predict=True),
            demands=(Demand(8),),
        )
        return schedule(snap).starts[0].placements[0].node

    job = JobRequest(1, ("p",), gpus_per_node=1, time_limit_s=4000, predicted_s=1000)
    assert node_of(job, running) == "b"
    # a job expected to outlast both: a is no better kept, the static rule's tie stands
    assert (
        node_of(
            JobRequest(2, ("p",), gpus_per_node=1, time_limit_s=9000, predicted_s=6000), running
        )
        == "a"
    )
    # nothing ends (ATC'23's inflation experiment): the static rule, name order
    busy = tuple(RunningView(r.job_id, float("inf"), r.placements) for r in running)
    assert node_of(job, busy) == "a"
