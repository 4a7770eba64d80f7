"""Victim selection in the scheduling core (Slurm's preempt/qos), on plain snapshots."""

from __future__ import annotations

import pytest

from ctld.sched import (
    Claim,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    QosView,
    RunningView,
    Snapshot,
    backfill,
    schedule,
)

QOS = (
    QosView("high", priority=100, preempts=("low",), mode="requeue"),
    QosView("low", priority=0, mode="requeue", grace_s=30),
    QosView("normal", priority=10, mode="requeue"),
)


def run(
    job_id: int, node: str, gpus: tuple[int, ...], *, qos: str = "low", **kw: object
) -> RunningView:
    placement = Placement(node, len(gpus) or 1, 100, gpus)
    return RunningView(job_id, 1000.0, (placement,), user="u", qos=qos, **kw)  # type: ignore[arg-type]


def snap(
    *pending: JobRequest,
    running: tuple[RunningView, ...] = (),
    nodes: tuple[str, ...] = ("n1", "n2"),
    qos: tuple[QosView, ...] = QOS,
    claims: tuple[Claim, ...] = (),
) -> Snapshot:
    views = []
    for name in nodes:
        used = [p for r in running for p in r.placements if p.node == name]
        views.append(
            NodeView(
                name=name,
                cpus_total=8,
                mem_total_mb=1000,
                gpus_total=4,
                cpus_free=8 - sum(p.cpus for p in used),
                mem_free_mb=1000 - sum(p.mem_mb for p in used),
                gpus_free=tuple(i for i in range(4) if all(i not in p.gpu_indices for p in used)),
                idle=not used,
            )
        )
    return Snapshot(
        version=1,
        now=0.0,
        nodes=tuple(views),
        partitions=(PartitionView("p", nodes),),
        pending=pending,
        running=running,
        qos=qos,
        claims=claims,
    )


def high(job_id: int = 10, gpus: int = 4, **kw: object) -> JobRequest:
    return JobRequest(job_id, ("p",), gpus_per_node=gpus, qos="high", time_limit_s=600, **kw)  # type: ignore[arg-type]


def full() -> tuple[RunningView, ...]:
    return (run(1, "n1", (0, 1, 2, 3)), run(2, "n2", (0, 1, 2, 3)))


def test_no_preemption_without_a_qos_that_allows_it() -> None:
    plan = schedule(snap(JobRequest(10, ("p",), gpus_per_node=4, qos="normal"), running=full()))
    assert plan.preemptions == () and plan.reasons[10] == "Resources"
    off = tuple(QosView(q.name, q.priority, mode=q.mode) for q in QOS)  # cluster mode off
    assert schedule(snap(high(), running=full(), qos=off)).preemptions == ()


def test_preempts_the_youngest_of_equal_jobs_and_claims_its_gpus() -> None:
    running = (
        run(1, "n1", (0, 1, 2, 3), start_time=100.0),
        run(2, "n2", (0, 1, 2, 3), start_time=200.0),
    )
    plan = schedule(snap(high(), running=running))
    (p,) = plan.preemptions
    assert (p.job_id, p.victims, p.partition) == (10, (2,), "p")
    assert p.placements == (Placement("n2", 1, 0, (0, 1, 2, 3)),)
    assert plan.reasons[10] == "Resources" and plan.starts == ()
    forecast = plan.forecasts[10]
    assert forecast.waits_for == (2,) and forecast.reserved and forecast.nodes == ("n2",)


def test_lowest_priority_first_then_only_the_needed_ones() -> None:
    # job 1 (the lowest) holds 1 GPU on n1, beside 3 held by a job nobody may preempt:
    # taking it is not enough; job 3 on n2 is, so job 1 is left alone
    running = (
        run(1, "n1", (0,), priority=1),
        run(2, "n1", (1, 2, 3), qos="normal"),
        run(3, "n2", (0, 1, 2, 3), priority=5),
    )
    (p,) = schedule(snap(high(), running=running)).preemptions
    assert p.victims == (3,)


def test_fewest_victims_on_one_node() -> None:
    running = (
        run(1, "n1", (0, 1), priority=1),
        run(2, "n1", (2, 3), priority=2),
        run(3, "n2", (0,), priority=3),
        run(4, "n2", (1, 2, 3), qos="normal"),
    )
    (p,) = schedule(snap(high(gpus=4), running=running)).preemptions
    assert p.victims == (1, 2) and p.placements[0].node == "n1"


def test_never_preempts_for_a_job_that_still_would_not_fit() -> None:
    running = (
        run(1, "n1", (0, 1)),
        run(2, "n1", (2, 3), qos="normal"),
        run(3, "n2", (0, 1, 2, 3), qos="normal"),
    )
    plan = schedule(snap(high(), running=running))
    assert plan.preemptions == () and plan.reasons[10] == "Resources"
    # too big for any node: nothing is preempted either
    assert schedule(snap(high(gpus=8), running=full())).preemptions == ()


def test_mode_off_and_loops_protect_a_job() -> None:
    off = (QOS[0], QosView("low", mode="off"), QOS[2])
    assert schedule(snap(high(), running=full(), qos=off)).preemptions == ()
    # a QOS that could preempt the preemptor's back is never its victim
    mutual = (QOS[0], QosView("low", preempts=("high",), mode="requeue"), QOS[2])
    assert schedule(snap(high(), running=full(), qos=mutual)).preemptions == ()


def test_multi_node_preemptor_takes_both_nodes() -> None:
    req = JobRequest(10, ("p",), nodes_min=2, gpus_per_node=4, qos="high", time_limit_s=60)
    (p,) = schedule(snap(req, running=full())).preemptions
    assert p.victims == (1, 2) and {pl.node for pl in p.placements} == {"n1", "n2"}


def test_two_preemptors_do_not_share_victims() -> None:
    plan = schedule(snap(high(10), high(11), high(12), running=full()))
    victims = [p.victims for p in plan.preemptions]
    assert sorted(victims) == [(1,), (2,)]
    assert plan.reasons[12] == "Resources"  # nothing left to preempt for it


def test_a_claim_is_kept_for_its_preemptor_only() -> None:
    claim = Claim(10, (Placement("n1", 1, 0, (0, 1, 2, 3)),), victims=(), partition="p")
    other = JobRequest(11, ("p",), gpus_per_node=4, priority=1000, time_limit_s=60)
    busy = (run(2, "n2", (0, 1, 2, 3), qos="normal"),)
    plan = schedule(snap(other, high(10, priority=1), running=busy, claims=(claim,)))
    starts = {s.job_id: s.placements[0].node for s in plan.starts}
    assert starts == {10: "n1"}  # the higher job 11 does not take what was freed for 10


def test_a_preemptor_waits_for_its_victims_without_preempting_more() -> None:
    claim = Claim(10, (Placement("n1", 1, 0, (0, 1, 2, 3)),), victims=(1,), partition="p")
    leaving = run(1, "n1", (0, 1, 2, 3), preemptable=False)
    plan = schedule(snap(high(10), running=(leaving, run(2, "n2", (0, 1, 2, 3))), claims=(claim,)))
    assert plan.preemptions == () and plan.starts == ()
    assert plan.forecasts[10].waits_for == (1,)


def test_claim_counts_only_what_is_free_while_victims_leave() -> None:
    # the victim holds 2 of n1's 8 CPUs and all GPUs; the claim wants 4 CPUs and the
    # GPUs: 2 of the 6 free CPUs are claimed now, the victim's 2 when it is gone
    victim = RunningView(
        1, 30.0, (Placement("n1", 2, 100, (0, 1, 2, 3)),), qos="low", preemptable=False
    )
    claim = Claim(10, (Placement("n1", 4, 100, (0, 1, 2, 3)),), victims=(1,), partition="p")

    def starts(cpus: int) -> list[int]:
        job = JobRequest(11, ("p",), cpus_per_task=cpus, time_limit_s=600)
        plan = schedule(snap(job, high(10), running=(victim,), nodes=("n1",), claims=(claim,)))
        return [s.job_id for s in plan.starts]

    assert starts(4) == [11]  # nothing counted twice: the other 4 stay usable
    assert starts(5) == []  # it would fit now, but hold the claim's CPUs afterwards
    unclaimed = snap(JobRequest(11, ("p",), cpus_per_task=5), running=(victim,), nodes=("n1",))
    assert [s.job_id for s in schedule(unclaimed).starts] == [11]


def test_a_pass_searches_for_a_bounded_number_of_preemptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backfill, "MAX_PREEMPT_SEARCHES", 1)
    plan = schedule(snap(high(10), high(11), running=full()))
    assert [p.job_id for p in plan.preemptions] == [10]  # 11's turn comes next pass
