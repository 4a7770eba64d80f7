from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ctld.sched import (
    INFINITY,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    ReservationView,
    RunningView,
    Settings,
    Snapshot,
    job_shape,
    schedule,
)
from ctld.sched.predict import expected_end


def node(name: str, cpus: int = 8, gpus: int = 4, gtype: str = "h100") -> NodeView:
    return NodeView(
        name=name,
        cpus_total=cpus,
        mem_total_mb=1000,
        gpus_total=gpus,
        cpus_free=cpus,
        mem_free_mb=1000,
        gpus_free=tuple(range(gpus)),
        gpu_type=gtype,
    )


def snap(*jobs: JobRequest, nodes: tuple[NodeView, ...] | None = None) -> Snapshot:
    nodes = nodes or (node("n1"), node("n2"))
    return Snapshot(
        version=3,
        now=0.0,
        nodes=nodes,
        partitions=(PartitionView("p", tuple(n.name for n in nodes)),),
        pending=jobs,
    )


def test_places_gpus_by_index_without_overlap() -> None:
    plan = schedule(
        snap(
            JobRequest(1, ("p",), gpus_per_node=3),
            JobRequest(2, ("p",), gpus_per_node=2),
            JobRequest(3, ("p",), gpus_per_node=1),
        )
    )
    assert plan.snapshot_version == 3
    by_job = {s.job_id: s.placements for s in plan.starts}
    assert by_job[1][0].node == "n1" and by_job[1][0].gpu_indices == (0, 1, 2)
    assert by_job[2][0].node == "n2" and by_job[2][0].gpu_indices == (0, 1)
    assert by_job[3][0].node == "n1" and by_job[3][0].gpu_indices == (3,)


def test_multi_node_and_reasons() -> None:
    plan = schedule(
        snap(
            JobRequest(1, ("p",), nodes_min=2, ntasks=4, cpus_per_task=2),
            JobRequest(2, ("p",), nodes_min=3),
            JobRequest(3, ("p",), blocked_reason="JobHeldUser"),
        )
    )
    (start,) = plan.starts
    assert [p.node for p in start.placements] == ["n1", "n2"]
    assert all(p.cpus == 4 for p in start.placements)
    assert plan.reasons == {2: "Resources", 3: "JobHeldUser"}


def test_gpu_type_exclusive_and_down_nodes() -> None:
    nodes = (
        node("a", gtype="a100"),
        node("b"),
        NodeView(
            name="c",
            cpus_total=8,
            mem_total_mb=1000,
            gpus_total=4,
            cpus_free=8,
            mem_free_mb=1000,
            gpus_free=(0, 1, 2, 3),
            gpu_type="h100",
            schedulable=False,
        ),
    )
    plan = schedule(
        snap(
            JobRequest(1, ("p",), gpus_per_node=1, gpu_type="h100"),
            JobRequest(2, ("p",), exclusive=True),
            JobRequest(3, ("p",), exclusive=True),
            nodes=nodes,
        )
    )
    by_job = {s.job_id: s.placements for s in plan.starts}
    assert by_job[1][0].node == "b"
    assert by_job[2][0].node == "a" and by_job[2][0].cpus == 8
    assert plan.reasons[3] == "Resources"


def test_partition_limits_give_reasons() -> None:
    s = Snapshot(
        version=1,
        now=0.0,
        nodes=(node("n1"),),
        partitions=(
            PartitionView("p", ("n1",), max_time_s=60),
            PartitionView("d", ("n1",), state="DOWN"),
        ),
        pending=(JobRequest(1, ("p",), time_limit_s=120), JobRequest(2, ("d",))),
    )
    plan = schedule(s)
    assert plan.starts == ()
    assert plan.reasons == {1: "PartitionTimeLimit", 2: "PartitionDown"}


# ---------------------------------------------------------------- backfill


def busy(name: str, gpus_used: int, cpus_used: int = 4, gpus: int = 4, cpus: int = 8) -> NodeView:
    return NodeView(
        name=name,
        cpus_total=cpus,
        mem_total_mb=1000,
        gpus_total=gpus,
        cpus_free=cpus - cpus_used,
        mem_free_mb=1000,
        gpus_free=tuple(range(gpus_used, gpus)),
        gpu_type="h100",
        idle=False,
    )


def running(job_id: int, end: float, node: str, gpus: int, cpus: int = 4) -> RunningView:
    return RunningView(job_id, end, (Placement(node, cpus, 0, tuple(range(gpus))),))


def two_node_snap(*jobs: JobRequest, settings: Settings | None = None) -> Snapshot:
    # n1's four GPUs are busy until t=100; n2 is free
    nodes = (busy("n1", 4), node("n2"))
    return Snapshot(
        version=1,
        now=0.0,
        nodes=nodes,
        partitions=(PartitionView("p", ("n1", "n2")),),
        pending=jobs,
        running=(running(90, 100.0, "n1", 4),),
        settings=settings or Settings(),
    )


BIG = JobRequest(1, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=1000)
SHORT = JobRequest(2, ("p",), gpus_per_node=4, time_limit_s=50)
LONG = JobRequest(3, ("p",), gpus_per_node=4, time_limit_s=500)


def test_easy_backfills_a_short_job_but_not_one_that_would_delay_the_top_job() -> None:
    plan = schedule(two_node_snap(BIG, SHORT, LONG))
    assert [s.job_id for s in plan.starts] == [2]
    top = plan.forecasts[1]
    assert top.start == 100.0 and top.reserved and top.nodes == ("n1", "n2")
    assert top.waits_for == (90,)
    assert plan.reasons == {1: "Resources", 3: "Priority"}
    assert plan.forecasts[3].start == 1100.0 and not plan.forecasts[3].reserved


def test_fcfs_starts_nothing_behind_a_blocked_job() -> None:
    plan = schedule(two_node_snap(BIG, SHORT, settings=Settings(backfill=False)))
    assert plan.starts == () and plan.reasons == {1: "Resources", 2: "Priority"}


def test_conservative_reserves_for_every_blocked_job() -> None:
    plan = schedule(two_node_snap(BIG, LONG, SHORT, settings=Settings(reserve_depth=10**6)))
    # SHORT still fits before BIG's reservation: nothing reserved later blocks it
    assert [s.job_id for s in plan.starts] == [2]
    assert plan.forecasts[3].reserved and plan.forecasts[3].start == 1100.0


def test_unlimited_job_never_backfills_in_front_of_a_reservation() -> None:
    unlimited = JobRequest(4, ("p",), gpus_per_node=1, time_limit_s=-1)
    plan = schedule(two_node_snap(BIG, unlimited))
    assert plan.starts == () and plan.reasons[4] == "Priority"


def test_pack_places_a_small_gpu_job_on_the_partly_used_node() -> None:
    nodes = (node("n1"), busy("n2", 2))
    s = Snapshot(
        1,
        0.0,
        nodes,
        (PartitionView("p", ("n1", "n2")),),
        (JobRequest(1, ("p",), gpus_per_node=1),),
    )
    assert schedule(s).starts[0].placements[0].node == "n2"
    ff = Snapshot(1, 0.0, nodes, s.partitions, s.pending, settings=Settings(placement="firstfit"))
    assert schedule(ff).starts[0].placements[0].node == "n1"
    assert schedule(s).starts[0].placements[0].gpu_indices == (2,)


def test_advance_reservation_keeps_its_nodes_for_its_users() -> None:
    resv = ReservationView("maint", start=100.0, end=200.0, nodes=("n1",), users=("ops",))
    fits_before = JobRequest(1, ("p",), time_limit_s=50)
    overlaps = JobRequest(2, ("p",), time_limit_s=150)
    inside = JobRequest(3, ("p",), time_limit_s=50, reservation="maint")
    s = Snapshot(
        1,
        0.0,
        (node("n1"),),
        (PartitionView("p", ("n1",)),),
        (fits_before, overlaps, inside),
        reservations=(resv,),
        settings=Settings(reserve_depth=5),
    )
    plan = schedule(s)
    assert [st.job_id for st in plan.starts] == [1]
    assert plan.forecasts[2].start == 200.0  # after the reservation ends
    assert plan.reasons[3] == "Reservation" and plan.forecasts[3].start == 100.0


def test_first_partition_that_can_run_it() -> None:
    s = Snapshot(
        1,
        0.0,
        (busy("a1", 4), node("b1")),
        (PartitionView("a", ("a1",)), PartitionView("b", ("b1",))),
        (JobRequest(1, ("a", "b"), gpus_per_node=2),),
    )
    (start,) = schedule(s).starts
    assert start.partition == "b" and start.placements[0].node == "b1"


def test_qos_max_jobs_per_user() -> None:
    s = Snapshot(
        1,
        0.0,
        (node("n1"),),
        (PartitionView("p", ("n1",)),),
        tuple(JobRequest(i, ("p",), user="al", qos="normal") for i in (1, 2, 3)),
        running=(RunningView(9, 50.0, (Placement("n1", 1, 0, ()),), user="al", qos="normal"),),
        settings=Settings(qos_max_jobs_per_user=(("normal", 2),)),
    )
    plan = schedule(s)
    assert [st.job_id for st in plan.starts] == [1]
    assert plan.reasons == {2: "QOSMaxJobsPerUserLimit", 3: "QOSMaxJobsPerUserLimit"}


def test_required_and_excluded_nodes() -> None:
    s = snap(
        JobRequest(1, ("p",), nodes_min=2, nodelist=("n2",)),
        JobRequest(2, ("p",), exclude=("n1", "n2")),
        JobRequest(3, ("p",), nodelist=("zz",)),
        nodes=(node("n1"), node("n2"), node("n3")),
    )
    plan = schedule(s)
    by_job = {st_.job_id: [p.node for p in st_.placements] for st_ in plan.starts}
    assert "n2" in by_job[1] and len(by_job[1]) == 2
    assert by_job[2] == ["n3"]
    assert plan.reasons == {3: "ReqNodeNotAvail"}


def test_down_or_drained_nodes_are_named_as_slurm_does() -> None:
    import dataclasses

    drained = dataclasses.replace(node("n2"), schedulable=False)
    s = snap(
        JobRequest(1, ("p",), nodes_min=2),  # would fit but for n2
        JobRequest(2, ("p",), nodelist=("n2",)),
        JobRequest(3, ("p",), nodes_min=3),  # never fits: the usual reason
        nodes=(node("n1"), drained),
    )
    plan = schedule(s)
    # as a real 22.05 words them: required (-w) nodes are named; too few nodes up
    # for a job that names none is Slurm's "Nodes required for job are DOWN, ..."
    assert plan.reasons == {
        1: "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
        "priority partitions",
        2: "ReqNodeNotAvail, UnavailableNodes:n2",
        3: "Resources",
    }


# ---------------------------------------------------------------- properties


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    n_nodes = draw(st.integers(1, 4))
    nodes, runs = [], []
    job_id = 1000
    for i in range(n_nodes):
        cpus, gpus = draw(st.integers(1, 8)), draw(st.integers(0, 4))
        used_c, used_g = draw(st.integers(0, cpus)), draw(st.integers(0, gpus))
        name = f"n{i}"
        nodes.append(
            NodeView(
                name,
                cpus,
                1000,
                gpus,
                cpus - used_c,
                1000,
                tuple(range(used_g, gpus)),
                gpu_type="h100",
                idle=not (used_c or used_g),
            )
        )
        if used_c or used_g:
            job_id += 1
            end = draw(st.sampled_from([10.0, 50.0, 100.0, INFINITY]))
            runs.append(
                RunningView(
                    job_id,
                    end,
                    (Placement(name, used_c, 0, tuple(range(used_g))),),
                    start_time=-10.0,
                    predicted_s=draw(st.sampled_from([0.0, 5.0, 15.0, 40.0])),
                )
            )
    names = tuple(n.name for n in nodes)
    jobs = tuple(
        JobRequest(
            j,
            ("p",),
            nodes_min=draw(st.integers(1, 2)),
            cpus_per_task=draw(st.integers(1, 4)),
            gpus_per_node=draw(st.integers(0, 3)),
            time_limit_s=draw(st.sampled_from([5, 30, 60, 200, -1])),
            exclusive=draw(st.booleans()),
            predicted_s=draw(st.sampled_from([0, 3, 20, 100])),
        )
        for j in range(1, draw(st.integers(1, 8)) + 1)
    )
    settings = Settings(
        backfill=draw(st.booleans()),
        reserve_depth=draw(st.integers(0, 3)),
        placement=draw(st.sampled_from(["pack", "firstfit", "frag"])),
        predict=draw(st.booleans()),
        backfill_order=draw(st.sampled_from(["priority", "shortest"])),
    )
    return Snapshot(
        1, 0.0, tuple(nodes), (PartitionView("p", names),), jobs, tuple(runs), settings=settings
    )


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_no_oversubscription_and_gpu_indices_unique(s: Snapshot) -> None:
    plan = schedule(s)
    views = {n.name: n for n in s.nodes}
    used_cpus = {n.name: 0 for n in s.nodes}
    used_gpus: dict[str, set[int]] = {n.name: set() for n in s.nodes}
    for start in plan.starts:
        for p in start.placements:
            used_cpus[p.node] += p.cpus
            assert not used_gpus[p.node] & set(p.gpu_indices), "a GPU index given twice"
            assert set(p.gpu_indices) <= set(views[p.node].gpus_free), "a busy GPU given"
            used_gpus[p.node] |= set(p.gpu_indices)
    for name, view in views.items():
        assert used_cpus[name] <= view.cpus_free


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_plan_is_deterministic(s: Snapshot) -> None:
    assert schedule(s) == schedule(s)


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_backfill_never_delays_the_reservation(s: Snapshot) -> None:
    plan = schedule(s)
    reserved = [f for f in plan.forecasts.values() if f.reserved]
    if not reserved:
        return
    top = reserved[0]
    req = next(j for j in s.pending if j.job_id == top.job_id)
    shape = job_shape(req)
    # replaying every time limit; with predictions, every prediction (when they are
    # right the reservation holds; when wrong, only advance reservations are safe)
    predict = s.settings.predict

    def run_for(j: JobRequest) -> float:
        limit = INFINITY if j.time_limit_s < 0 else float(max(j.time_limit_s, 1))
        return min(float(j.predicted_s), limit) if predict and j.predicted_s > 0 else limit

    runs = {j.job_id: run_for(j) for j in s.pending}
    ends = [
        (
            expected_end(r.start_time, r.predicted_s, r.end_time, s.now) if predict else r.end_time,
            r.placements,
        )
        for r in s.running
    ]
    ends += [(runs[st_.job_id], st_.placements) for st_ in plan.starts]
    views = {n.name: n for n in s.nodes}
    for name in top.nodes:
        # what still holds this node at the reserved start, replaying every time limit
        cpus = sum(p.cpus for end, ps in ends if end > top.start for p in ps if p.node == name)
        gpus = [
            g
            for end, ps in ends
            if end > top.start
            for p in ps
            if p.node == name
            for g in p.gpu_indices
        ]
        total = views[name]
        if req.exclusive:
            assert cpus == 0 and not gpus
        else:
            assert total.cpus_total - cpus >= shape.cpus_per_node
            assert total.gpus_total - len(gpus) >= shape.gpus_per_node


def test_gpus_per_task_multiplies_by_tasks_per_node() -> None:
    plan = schedule(snap(JobRequest(1, ("p",), ntasks=2, gpus_per_task=2)))
    (start,) = plan.starts
    assert start.placements[0].gpu_indices == (0, 1, 2, 3)


@st.composite
def snapshots_with_rules(draw: st.DrawFn) -> Snapshot:
    base = draw(snapshots())
    names = [n.name for n in base.nodes]
    part_nodes = tuple(draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    max_time = draw(st.sampled_from([-1, 30, 100]))
    resv_nodes = tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True)))
    start = draw(st.sampled_from([0.0, 20.0, 80.0]))
    resv = ReservationView("r", start, start + 50.0, resv_nodes) if resv_nodes else None
    jobs = tuple(
        JobRequest(
            j.job_id,
            ("p",),
            nodes_min=j.nodes_min,
            cpus_per_task=j.cpus_per_task,
            gpus_per_node=j.gpus_per_node,
            time_limit_s=j.time_limit_s,
            reservation="r" if resv and draw(st.booleans()) else "",
            predicted_s=j.predicted_s,
        )
        for j in base.pending
    )
    return Snapshot(
        1,
        0.0,
        base.nodes,
        (PartitionView("p", part_nodes, max_time_s=max_time),),
        jobs,
        base.running,
        (resv,) if resv else (),
        base.settings,
    )


@settings(max_examples=300, deadline=None)
@given(snapshots_with_rules())
def test_partition_and_reservation_rules_hold(s: Snapshot) -> None:
    plan = schedule(s)
    (part,) = s.partitions
    jobs = {j.job_id: j for j in s.pending}
    resv = s.reservations[0] if s.reservations else None
    for start in plan.starts:
        job = jobs[start.job_id]
        nodes = {p.node for p in start.placements}
        assert nodes <= set(part.nodes)
        if part.max_time_s >= 0:
            assert 0 <= job.time_limit_s <= part.max_time_s
        end = INFINITY if job.time_limit_s < 0 else float(job.time_limit_s)
        if resv is None:
            continue
        if job.reservation:
            assert nodes <= set(resv.nodes) and resv.start <= 0.0 and end <= resv.end
        elif nodes & set(resv.nodes):
            # ends before the reservation begins, to its limit: a prediction (however
            # short) never lets a job run into an advance reservation
            assert end <= resv.start


# ---------------------------------------------------------------- classes of jobs


@st.composite
def crowded_snapshots(draw: st.DrawFn) -> Snapshot:
    """Queues where many jobs are copies of a few (the usual deep queue), with users
    under a QOS limit and small forecast depths."""
    base = draw(snapshots_with_rules())
    templates = [
        replace(j, user=draw(st.sampled_from(["ann", "bob"])), qos="q") for j in base.pending
    ]
    jobs = tuple(
        replace(
            draw(st.sampled_from(templates)),
            job_id=j,
            # class-mates may differ in age: some past the starvation guard, some not
            eligible_time=draw(st.sampled_from([-100.0, -1.0])),
        )
        for j in range(1, draw(st.integers(1, 16)) + 1)
    )
    settings = replace(
        base.settings,
        starve_after_s=draw(st.sampled_from([0.0, 50.0])),
        forecast_depth=draw(st.integers(0, 3)),
        qos_max_jobs_per_user=draw(st.sampled_from([(), (("q", 1),), (("q", 2),)])),
    )
    return replace(base, pending=jobs, settings=settings)


def _one_class_each(s: Snapshot) -> Snapshot:
    """``s`` with every job in a class of its own: the core then tries each in full."""
    alone = []
    for req in s.pending:
        copy = replace(req)
        object.__setattr__(copy, "klass", -req.job_id)  # numbers the core never gives
        alone.append(copy)
    return replace(s, pending=tuple(alone))


@settings(max_examples=400, deadline=None)
@given(crowded_snapshots())
def test_deciding_once_per_class_changes_no_plan(s: Snapshot) -> None:
    assert schedule(s) == schedule(_one_class_each(s))


def test_max_job_test_bounds_the_full_tries_and_leaves_the_rest_out() -> None:
    # five distinct shapes that cannot start, then copies of the first
    nodes = (replace(node("n1"), cpus_free=0, idle=False),)
    jobs = [JobRequest(j, ("p",), cpus_per_task=j, time_limit_s=60) for j in range(1, 6)]
    jobs += [JobRequest(j, ("p",), cpus_per_task=1, time_limit_s=60) for j in range(6, 9)]
    limited = replace(snap(*jobs, nodes=nodes), settings=Settings(max_job_test=2))
    plan = schedule(limited)
    # jobs 1 and 2 are tried; 3-5 are past the limit and keep what they had; the
    # copies of job 1 are decided by their class, which is no try
    assert set(plan.reasons) == {1, 2, 6, 7, 8}
    assert plan.reasons[1] == "Resources" and plan.reasons[6] == "Priority"
    assert set(schedule(replace(limited, settings=Settings())).reasons) == set(range(1, 9))
