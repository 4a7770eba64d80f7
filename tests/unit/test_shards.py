"""GPU sharing (gres/shard) in the scheduling core: placement and its invariants."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ctld.sched import (
    INFINITY,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
    job_shape,
    schedule,
)
from ctld.sched.frag import Fragmentation
from ctld.sched.model import Demand
from ctld.sched.predict import expected_end

POLICIES = ["pack", "firstfit", "frag", "fgd", "random"]


def gpu_node(
    name: str, gpus: int = 2, shards: int = 10, used: tuple[tuple[int, int], ...] = ()
) -> NodeView:
    shared = {g for g, _ in used}
    return NodeView(
        name,
        16,
        1000,
        gpus,
        16,
        1000,
        tuple(g for g in range(gpus) if g not in shared),
        shards_per_gpu=shards,
        shards_used=used,
        idle=not used,
    )


def one(
    *jobs: JobRequest,
    nodes: tuple[NodeView, ...],
    placement: str = "pack",
    running: tuple[RunningView, ...] = (),
) -> Snapshot:
    return Snapshot(
        1,
        0.0,
        nodes,
        (PartitionView("p", tuple(n.name for n in nodes)),),
        jobs,
        running,
        settings=Settings(placement=placement),
    )


def shard_job(job_id: int, k: int, limit: int = 100) -> JobRequest:
    return JobRequest(job_id, ("p",), shards_per_node=k, time_limit_s=limit)


def test_two_shard_jobs_share_one_gpu_and_a_gpu_job_takes_the_other() -> None:
    plan = schedule(
        one(
            shard_job(1, 4),
            shard_job(2, 6),
            JobRequest(3, ("p",), gpus_per_node=1, time_limit_s=100),
            JobRequest(4, ("p",), gpus_per_node=1, time_limit_s=100),
            nodes=(gpu_node("n1"),),
        )
    )
    got = {s.job_id: s.placements[0] for s in plan.starts}
    assert got[1].gpu_indices == got[2].gpu_indices == (0,)
    assert (got[1].shards, got[2].shards) == (4, 6)
    assert got[3].gpu_indices == (1,) and got[3].shards == 0
    assert 4 not in got  # GPU 0 holds shards: not given whole
    assert plan.reasons[4] == "Resources"


def test_a_whole_gpu_job_waits_for_the_last_shard_job_on_its_gpu() -> None:
    nodes = (gpu_node("n1", gpus=1, used=((0, 3),)),)
    running = (
        RunningView(7, 50.0, (Placement("n1", 1, 0, (0,), 2),)),
        RunningView(8, 80.0, (Placement("n1", 1, 0, (0,), 1),)),
    )
    plan = schedule(
        one(JobRequest(1, ("p",), gpus_per_node=1, time_limit_s=10), nodes=nodes, running=running)
    )
    assert not plan.starts
    assert plan.forecasts[1].start == 80.0
    assert plan.forecasts[1].waits_for == (7, 8)


def test_a_shard_job_does_not_join_a_gpu_reserved_for_a_whole_gpu_job() -> None:
    # GPU 0 is shared until 80; the top job (a whole GPU) is reserved from then on: a
    # shard job that would run past 80 may not join GPU 0, one that ends by then may
    nodes = (gpu_node("n1", gpus=1, used=((0, 3),)),)
    running = (RunningView(8, 80.0, (Placement("n1", 1, 0, (0,), 3),)),)
    top = JobRequest(1, ("p",), gpus_per_node=1, time_limit_s=100, priority=10)
    long = shard_job(2, 2, limit=200)
    short = shard_job(3, 2, limit=50)
    plan = schedule(one(top, long, short, nodes=nodes, running=running))
    assert [s.job_id for s in plan.starts] == [3]
    assert plan.starts[0].placements[0].gpu_indices == (0,)


def test_pack_joins_the_fullest_shared_gpu_and_firstfit_the_lowest() -> None:
    nodes = (gpu_node("n1", gpus=3, used=((0, 2), (1, 7))),)
    for placement, gpu in (("pack", 1), ("firstfit", 0), ("fgd", 1)):
        plan = schedule(one(shard_job(1, 3), nodes=nodes, placement=placement))
        assert plan.starts[0].placements[0].gpu_indices == (gpu,), placement


def test_fgd_keeps_a_whole_node_for_the_big_jobs_to_come() -> None:
    # n1 has one GPU shared, n2 is whole; the jobs to come ask 2 whole GPUs: a shard job
    # goes to n1 under FGD even where n2 comes first in the list
    nodes = (gpu_node("n2"), gpu_node("n1", used=((0, 8),)))
    snap = one(shard_job(1, 1), nodes=nodes, placement="fgd")
    snap = Snapshot(
        snap.version,
        snap.now,
        snap.nodes,
        snap.partitions,
        snap.pending,
        settings=snap.settings,
        demands=(Demand(2),),
    )
    plan = schedule(snap)
    assert plan.starts[0].placements[0].node == "n1"


def test_fragmentation_counts_what_the_demands_cannot_use() -> None:
    frag = Fragmentation((Demand(0, cpus=1, shards=5),))
    # 8 CPUs, 1 free GPU, shared GPUs with 3 and 6 shards left, 10 per GPU: a 5-shard
    # demand fits; the GPU with 3 left is a fragment (0.3 of a GPU)
    assert abs(frag.of((8, 100, 1, (3, 6), 10)) - 0.3) < 1e-9
    # no CPU left: nothing of the node is usable
    assert abs(frag.of((0, 100, 1, (3, 6), 10)) - 1.9) < 1e-9
    whole = Fragmentation((Demand(1),))
    assert abs(whole.of((8, 100, 1, (3, 6), 10)) - 0.9) < 1e-9


# ---------------------------------------------------------------- properties


@st.composite
def shard_snapshots(draw: st.DrawFn) -> Snapshot:
    nodes, runs = [], []
    job_id = 1000
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(0, 3))
        per_gpu = draw(st.sampled_from([0, 4, 10])) if gpus else 0
        cpus = draw(st.integers(1, 8))
        used_c = 0
        used: list[tuple[int, int]] = []
        whole_used: set[int] = set()
        name = f"n{i}"
        for g in range(gpus):
            kind = draw(
                st.sampled_from(["free", "whole", "shared"] if per_gpu else ["free", "whole"])
            )
            if kind == "whole":
                whole_used.add(g)
                job_id += 1
                runs.append(
                    RunningView(
                        job_id,
                        draw(st.sampled_from([10.0, 50.0, INFINITY])),
                        (Placement(name, 0, 0, (g,)),),
                        start_time=-10.0,
                        predicted_s=draw(st.sampled_from([0.0, 5.0, 40.0])),
                    )
                )
            elif kind == "shared":
                taken = 0
                for _ in range(draw(st.integers(1, 2))):
                    k = draw(st.integers(1, per_gpu - taken)) if per_gpu - taken else 0
                    if not k:
                        break
                    taken += k
                    job_id += 1
                    runs.append(
                        RunningView(
                            job_id,
                            draw(st.sampled_from([10.0, 50.0, 100.0])),
                            (Placement(name, 0, 0, (g,), k),),
                            start_time=-10.0,
                            predicted_s=draw(st.sampled_from([0.0, 5.0, 40.0])),
                        )
                    )
                used.append((g, taken))
        shared = {g for g, _ in used}
        nodes.append(
            NodeView(
                name,
                cpus,
                1000,
                gpus,
                cpus - used_c,
                1000,
                tuple(g for g in range(gpus) if g not in shared and g not in whole_used),
                shards_per_gpu=per_gpu,
                shards_used=tuple(used),
                idle=not (used or whole_used),
            )
        )
    names = tuple(n.name for n in nodes)
    jobs = []
    for j in range(1, draw(st.integers(1, 8)) + 1):
        shards = draw(st.sampled_from([0, 0, 1, 3, 4, 7]))
        jobs.append(
            JobRequest(
                j,
                ("p",),
                nodes_min=draw(st.integers(1, 2)),
                cpus_per_task=draw(st.integers(1, 3)),
                gpus_per_node=0 if shards else draw(st.integers(0, 2)),
                shards_per_node=shards,
                time_limit_s=draw(st.sampled_from([5, 30, 60, 200, -1])),
                exclusive=draw(st.booleans()) and draw(st.booleans()),
                predicted_s=draw(st.sampled_from([0, 3, 20, 100])),
            )
        )
    return Snapshot(
        1,
        0.0,
        tuple(nodes),
        (PartitionView("p", names),),
        tuple(jobs),
        tuple(runs),
        settings=Settings(
            backfill=draw(st.booleans()),
            reserve_depth=draw(st.integers(0, 3)),
            placement=draw(st.sampled_from(POLICIES)),
            predict=draw(st.booleans()),
            backfill_order=draw(st.sampled_from(["priority", "shortest"])),
        ),
    )


def _shards_used(s: Snapshot) -> dict[tuple[str, int], int]:
    return {(n.name, g): k for n in s.nodes for g, k in n.shards_used}


@settings(max_examples=400, deadline=None)
@given(shard_snapshots())
def test_no_gpu_over_its_shards_and_never_both_whole_and_shared(s: Snapshot) -> None:
    plan = schedule(s)
    views = {n.name: n for n in s.nodes}
    shards = _shards_used(s)
    whole: set[tuple[str, int]] = set()
    cpus = {n.name: 0 for n in s.nodes}
    for start in plan.starts:
        for p in start.placements:
            view = views[p.node]
            cpus[p.node] += p.cpus
            if p.shards:
                g = p.gpu_indices[0]
                key = (p.node, g)
                assert g in view.gpus_free or key in shards, "shards of a GPU in whole use"
                shards[key] = shards.get(key, 0) + p.shards
                assert shards[key] <= view.shards_per_gpu, "a GPU over its shards"
                rest = p.gpu_indices[1:]
            else:
                rest = p.gpu_indices
            for g in rest:
                assert g in view.gpus_free, "a busy or shared GPU given whole"
                assert (p.node, g) not in whole, "a GPU given whole twice"
                whole.add((p.node, g))
    assert not whole & set(shards), "a GPU both whole-allocated and shard-allocated"
    for name, view in views.items():
        assert cpus[name] <= view.cpus_free


@settings(max_examples=200, deadline=None)
@given(shard_snapshots())
def test_shard_plans_are_deterministic(s: Snapshot) -> None:
    assert schedule(s) == schedule(s)


@settings(max_examples=400, deadline=None)
@given(shard_snapshots())
def test_shard_backfill_never_delays_the_reservation(s: Snapshot) -> None:
    plan = schedule(s)
    reserved = [f for f in plan.forecasts.values() if f.reserved]
    if not reserved:
        return
    top = reserved[0]
    req = next(j for j in s.pending if j.job_id == top.job_id)
    shape = job_shape(req)
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
        # a GPU any job still holds at the reserved start (whole or shards of it)
        cpus = sum(p.cpus for end, ps in ends if end > top.start for p in ps if p.node == name)
        gpus = {
            g
            for end, ps in ends
            if end > top.start
            for p in ps
            if p.node == name
            for g in p.gpu_indices
        }
        total = views[name]
        if req.exclusive:
            assert cpus == 0 and not gpus
        else:
            need = shape.gpus_per_node + (1 if shape.shards_per_node else 0)
            assert total.cpus_total - cpus >= shape.cpus_per_node
            assert total.gpus_total - len(gpus) >= need
