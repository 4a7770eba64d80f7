"""The starvation guard: past ``starve_after_s`` a job goes ahead of every younger one
and its reservation is kept against the limits of the jobs backfilled around it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctld.sched import (
    INFINITY,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    RunningView,
    Settings,
    Snapshot,
    job_shape,
    schedule,
)
from ctld.sched.backfill import aged_first, starving_first
from ctld.sched.shape import Shape


def one_node(cpus_free: int) -> tuple[NodeView, ...]:
    return (NodeView("n", 4, 1000, 0, cpus_free, 1000, (), idle=cpus_free == 4),)


def plan_at(now: float, pending: tuple[JobRequest, ...], guard: float, **kw: object) -> Plan:
    # 2 of the 4 CPUs busy since 10 s ago: 90 s more as predicted, 990 s by the limit
    running = (
        RunningView(
            9, now + 990.0, (Placement("n", 2, 0, ()),), start_time=now - 10.0, predicted_s=100
        ),
    )
    return schedule(
        Snapshot(
            1,
            now,
            one_node(2),
            (PartitionView("p", ("n",)),),
            pending,
            running,
            settings=Settings(starve_after_s=guard, **kw),  # type: ignore[arg-type]
        )
    )


def test_a_job_past_the_threshold_takes_the_reservation_from_higher_priority() -> None:
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=100, priority=900, submit_time=4000.0),
        JobRequest(2, ("p",), ntasks=3, time_limit_s=100, priority=10, submit_time=0.0),
        JobRequest(3, ("p",), ntasks=3, time_limit_s=100, priority=20, submit_time=-500.0),
    )
    off = plan_at(5000.0, pending, 0.0)
    assert [f.job_id for f in off.forecasts.values() if f.reserved] == [1]
    on = plan_at(5000.0, pending, 3600.0)
    # jobs 3 and 2 waited over an hour: the oldest of them gets the reservation
    assert [f.job_id for f in on.forecasts.values() if f.reserved] == [3]
    assert on.reasons[3] == "Resources" and on.reasons[1] == "Priority"
    # a job that is held does not count, however old
    held = (pending[0], pending[1], JobRequest(3, ("p",), blocked_reason="JobHeldUser"))
    assert [f.job_id for f in plan_at(5000.0, held, 3600.0).forecasts.values() if f.reserved] == [2]


def test_the_eligible_time_counts_not_the_submit() -> None:
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=100, priority=900, submit_time=4000.0),
        JobRequest(2, ("p",), ntasks=4, time_limit_s=100, submit_time=0.0, eligible_time=4500.0),
    )
    plan = plan_at(5000.0, pending, 3600.0)
    assert [f.job_id for f in plan.forecasts.values() if f.reserved] == [1]


def test_a_starving_jobs_reservation_is_not_backfilled_on_a_prediction() -> None:
    # the top job needs all 4 CPUs: in 90 s by the running job's prediction, in 990 s
    # by its limit. A 2-CPU job with a 1500 s limit, predicted 50 s, would fit before
    # it on its prediction: allowed in front of an ordinary reservation, not in front
    # of a starving job's
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=1000, predicted_s=500, submit_time=0.0),
        JobRequest(2, ("p",), ntasks=2, time_limit_s=1500, predicted_s=50, submit_time=9.0),
    )
    fresh = plan_at(10.0, pending, 3600.0, predict=True)
    assert [s.job_id for s in fresh.starts] == [2] and fresh.starts[0].on_prediction
    starving = plan_at(5000.0, pending, 3600.0, predict=True)
    assert starving.starts == ()
    assert starving.forecasts[1].reserved and starving.forecasts[1].start == 5090.0
    assert starving.reasons[2] == "Priority"


@st.composite
def aged_snapshots(draw: st.DrawFn) -> Snapshot:
    nodes, runs = [], []
    for i in range(draw(st.integers(1, 3))):
        cpus, gpus = draw(st.integers(1, 8)), draw(st.integers(0, 4))
        used_c, used_g = draw(st.integers(0, cpus)), draw(st.integers(0, gpus))
        nodes.append(
            NodeView(
                f"n{i}",
                cpus,
                1000,
                gpus,
                cpus - used_c,
                1000,
                tuple(range(used_g, gpus)),
                idle=not (used_c or used_g),
            )
        )
        if used_c or used_g:
            runs.append(
                RunningView(
                    100 + i,
                    draw(st.sampled_from([10.0, 50.0, 100.0, INFINITY])),
                    (Placement(f"n{i}", used_c, 0, tuple(range(used_g))),),
                    start_time=-10.0,
                    predicted_s=draw(st.sampled_from([0.0, 5.0, 15.0, 40.0])),
                )
            )
    jobs = tuple(
        JobRequest(
            j,
            ("p",),
            nodes_min=draw(st.integers(1, 2)),
            cpus_per_task=draw(st.integers(1, 4)),
            gpus_per_node=draw(st.integers(0, 3)),
            time_limit_s=draw(st.sampled_from([5, 30, 60, 200, -1])),
            predicted_s=draw(st.sampled_from([0, 3, 20, 100])),
            priority=draw(st.integers(0, 5)),
            submit_time=draw(st.sampled_from([-5000.0, -2000.0, -100.0, 0.0])),
        )
        for j in range(1, draw(st.integers(1, 8)) + 1)
    )
    jobs = tuple(sorted(jobs, key=lambda r: (-r.priority, r.submit_time, r.job_id)))
    return Snapshot(
        1,
        0.0,
        tuple(nodes),
        (PartitionView("p", tuple(n.name for n in nodes)),),
        jobs,
        tuple(runs),
        settings=Settings(
            predict=True,
            backfill_order=draw(st.sampled_from(["priority", "shortest"])),
            placement=draw(st.sampled_from(["pack", "firstfit", "frag"])),
            starve_after_s=1000.0,
        ),
    )


Ends = list[tuple[float, tuple[Placement, ...]]]


def first_fit_time(s: Snapshot, names: tuple[str, ...], shape: Shape, ends: Ends) -> float:
    """The first instant every one of ``names`` has room for ``shape``, with each
    placement in ``ends`` busy until its end."""
    views = {n.name: n for n in s.nodes}
    for t in sorted({s.now} | {end for end, _ in ends if end != INFINITY}):
        busy = [p for end, ps in ends if end > t for p in ps]
        if all(
            views[n].cpus_total - sum(p.cpus for p in busy if p.node == n) >= shape.cpus_per_node
            and views[n].gpus_total - sum(len(p.gpu_indices) for p in busy if p.node == n)
            >= shape.gpus_per_node
            for n in names
        ):
            return t
    return INFINITY


@settings(max_examples=300, deadline=None)
@given(aged_snapshots())
def test_no_backfill_decision_delays_a_starving_jobs_reservation(s: Snapshot) -> None:
    """With every job running to its limit (any prediction wrong), the jobs started
    behind a starving job do not make its nodes free for it any later than they would
    be without them: its reservation is EASY's."""
    plan = schedule(s)
    reserved = [f for f in plan.forecasts.values() if f.reserved]
    if not reserved:
        return
    top = reserved[0]
    req = next(j for j in s.pending if j.job_id == top.job_id)
    order, moved = starving_first(s.pending, s.now - s.settings.starve_after_s)
    if req.job_id not in moved:
        return  # not the guarded job: its reservation is kept by predictions (test_backfill)
    ids = [j.job_id for j in order]
    ahead = set(ids[: ids.index(req.job_id)])
    limits = {j.job_id: (INFINITY if j.time_limit_s < 0 else j.time_limit_s) for j in s.pending}
    base = [(max(r.end_time, s.now + 1.0), r.placements) for r in s.running]
    started = [(x.job_id in ahead, (s.now + limits[x.job_id], x.placements)) for x in plan.starts]
    base += [end for first, end in started if first]
    behind = [end for first, end in started if not first]
    shape = job_shape(req)
    without = first_fit_time(s, top.nodes, shape, base)
    assert first_fit_time(s, top.nodes, shape, base + behind) <= without
    assert top.start <= without  # what it is told: the likely start, never later


def test_aged_backfill_candidates_go_before_shorter_younger_ones() -> None:
    # job 1 holds the reservation (all 4 CPUs); jobs 2 and 3 both fit the 2 free CPUs
    # before it, but not together: shortest-first takes the younger, shorter job 3,
    # unless job 2 has waited past ``backfill_aged_s`` (a bench variant, off by default)
    pending = (
        JobRequest(1, ("p",), ntasks=4, time_limit_s=100, priority=900, submit_time=4900.0),
        JobRequest(2, ("p",), ntasks=2, time_limit_s=500, priority=10, submit_time=0.0),
        JobRequest(3, ("p",), ntasks=2, time_limit_s=50, priority=10, submit_time=4950.0),
    )
    shortest = plan_at(5000.0, pending, 0.0, backfill_order="shortest")
    assert [s.job_id for s in shortest.starts] == [3]
    aged = plan_at(5000.0, pending, 0.0, backfill_order="shortest", backfill_aged_s=3600.0)
    assert [s.job_id for s in aged.starts] == [2]
    young = plan_at(5000.0, pending, 0.0, backfill_order="shortest", backfill_aged_s=6000.0)
    assert [s.job_id for s in young.starts] == [3]


def test_aged_first_keeps_the_order_of_the_young() -> None:
    rest = tuple(
        JobRequest(i, ("p",), submit_time=t) for i, t in enumerate((50.0, 0.0, 90.0, 10.0))
    )
    assert aged_first(rest, [2, 0, 1, 3], 20.0) == [1, 3, 2, 0]
    assert aged_first(rest, [2, 0, 1, 3], -1.0) == [2, 0, 1, 3]
