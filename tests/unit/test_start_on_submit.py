"""A new job that fits is started at submit, without a pass, exactly when a pass would.

ctld's ``scheduler.start_on_submit`` (ctld/planning/scheduling.py, ctld/sched/quick.py): when
only submits came since the last pass, the core decides new jobs on a short queue of
the last plan's reserved jobs and the new ones. The simulator takes the same path.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
from collections.abc import AsyncIterator

import pytest

from corral.config import ClusterConfig, parse_config
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import schedule
from ctld.sim import swf
from ctld.sim.engine import replay

ALICE = Identity("alice", 1000, 1000)


def config(nodes: int = 2, **scheduler: object) -> ClusterConfig:
    return parse_config(
        {
            "nodes": [{"names": f"n[1-{nodes}]"}],
            "partitions": [{"name": "gpu", "nodes": f"n[1-{nodes}]", "default": True}],
            "scheduler": scheduler,
        }
    )


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


async def new_cluster(path: pathlib.Path, cfg: ClusterConfig) -> Cluster:
    c = make_cluster(
        cfg, f"sqlite:///{path}", clock=ManualClock(), dispatcher=RecordingDispatcher()
    )
    await register_all(c, cpus=4, gpus=2)
    return c


async def close(c: Cluster) -> None:
    while c._tasks:
        await asyncio.gather(*list(c._tasks))
    c.store.close()


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[Cluster]:
    c = await new_cluster(tmp_path / "ctld.db", config())
    yield c
    await close(c)


async def reserved_queue(c: Cluster) -> pb.Job:
    """n1 busy for an hour; a 2-node job waits for it, reserved from then on both nodes."""
    await c.submit(ALICE, spec(gpus_per_node=2, nodelist="n1", time_limit_s=3600))
    await c.schedule_pass()
    top = await c.submit(ALICE, spec(gpus_per_node=2, nodes_min=2, time_limit_s=3600))
    await c.schedule_pass()
    assert top.state == js.PENDING and top.forecast_reserved
    c.state.versions.wake_event.clear()  # as the scheduler's loop does before a pass
    return top


async def test_a_job_that_fits_starts_at_submit_without_a_pass(cluster: Cluster) -> None:
    top = await reserved_queue(cluster)
    passes = cluster.passes
    # a GPU of n2 (n1's are busy) until before the reservation takes both of n2's
    short = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert short.state == js.RUNNING and short.nodelist == "n2"
    assert short.events[-1].cause == "sched:submit"
    assert cluster.passes == passes and not cluster.state.versions.wake_event.is_set()
    dispatcher = cluster.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher)
    await asyncio.gather(*list(cluster._tasks))  # the launch, as after a pass
    assert short.job_id in {r.job.job_id for _, r in dispatcher.launched}
    # the next job is decided at submit too (the start at submit was an arrival)
    other = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert other.state == js.RUNNING
    assert top.state == js.PENDING and top.forecast_reserved
    await cluster.schedule_pass()
    assert top.expected_start == pytest.approx(cluster.state.clock() + 3600, abs=2)


async def test_a_job_that_would_delay_the_reservation_waits(cluster: Cluster) -> None:
    top = await reserved_queue(cluster)
    # a GPU of n2 past the reservation's start, when it needs both
    long = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=7200))
    assert long.state == js.PENDING
    assert cluster.state.versions.wake_event.is_set()  # a pass writes its reason and forecast
    plan = schedule(cluster.snapshot())
    assert long.job_id not in {s.job_id for s in plan.starts}  # as a full pass decides
    await cluster.schedule_pass()
    assert long.state == js.PENDING and top.state == js.PENDING


async def test_no_start_at_submit_before_a_pass_or_after_another_change(
    cluster: Cluster,
) -> None:
    first = await cluster.submit(ALICE, spec(time_limit_s=60))
    assert first.state == js.PENDING  # no pass has run: nothing to decide against
    await cluster.schedule_pass()
    assert first.state == js.RUNNING
    # an end alone leaves the decision at submit possible (the short pass weighs the
    # waiting jobs: none here)
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[first.job_id])))
    after_cancel = await cluster.submit(ALICE, spec(time_limit_s=60))
    assert after_cancel.state == js.RUNNING
    # a released hold puts a job in the queue that no pass has seen: a pass decides
    held = await cluster.submit(ALICE, spec(time_limit_s=60, hold=True))
    release = pb.UpdateJobRequest(job_ids=[held.job_id], action=pb.JOB_UPDATE_RELEASE)
    await cluster.update_hold(ALICE, release)
    after_release = await cluster.submit(ALICE, spec(time_limit_s=60))
    assert after_release.state == js.PENDING and held.state == js.PENDING
    await cluster.schedule_pass()
    assert after_release.state == js.RUNNING and held.state == js.RUNNING


async def test_start_on_submit_can_be_switched_off(tmp_path: pathlib.Path) -> None:
    c = await new_cluster(tmp_path / "ctld.db", config(start_on_submit=False))
    try:
        await c.schedule_pass()
        job = await c.submit(ALICE, spec(time_limit_s=60))
        assert job.state == js.PENDING and c.state.versions.wake_event.is_set()
    finally:
        await close(c)


def _random_job(rng: random.Random, nodes: int) -> pb.JobSpec:
    return spec(
        gpus_per_node=rng.choice([0, 0, 1, 2]),
        cpus_per_task=rng.choice([1, 2, 4]),
        nodes_min=rng.choice([1, 1, 1, 2, nodes]),
        time_limit_s=rng.choice([30, 300, 1800, 3600, 7200]),
    )


async def settle(c: Cluster) -> None:
    while c._tasks:
        await asyncio.gather(*list(c._tasks))


async def test_an_end_wakes_a_pass_for_a_job_waiting_on_it(cluster: Cluster) -> None:
    await reserved_queue(cluster)
    short = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    after = await cluster.submit(ALICE, spec(time_limit_s=60, dependency=f"afterok:{short.job_id}"))
    await cluster.schedule_pass()
    cluster.state.versions.wake_event.clear()
    assert after.state == js.PENDING
    await end(cluster, short)
    await settle(cluster)
    assert cluster.state.versions.wake_event.is_set()  # its dependency is met: only a pass sees it
    await cluster.schedule_pass()
    assert after.state == js.RUNNING


async def end(c: Cluster, job: pb.Job) -> None:
    update = pb.JobStatusUpdate(
        job_id=job.job_id, kind=pb.JobStatusUpdate.KIND_EXITED, time=c.state.clock()
    )
    await c.report_status(pb.ReportJobStatusRequest(node=job.batch_host, updates=[update]))


@pytest.mark.parametrize("seed", range(16))
async def test_the_decision_at_submit_is_the_full_pass_decision(
    tmp_path: pathlib.Path, seed: int
) -> None:
    """Two clusters fed the same jobs: one decides the last at submit, the other asks a
    full pass over its whole queue; a job started at submit is started by the pass, on
    the same nodes, and nothing else is. Half the seeds end running jobs in between
    (resources freed: the waiting jobs are weighed too)."""
    rng = random.Random(seed)
    nodes = 4
    depth = rng.choice([1, 2])
    quick = await new_cluster(tmp_path / "a.db", config(nodes, reserve_depth=depth))
    full = await new_cluster(
        tmp_path / "b.db", config(nodes, start_on_submit=False, reserve_depth=depth)
    )
    try:
        jobs = [_random_job(rng, nodes) for _ in range(rng.randint(3, 12))]
        for c in (quick, full):
            for s in jobs:
                await c.submit(ALICE, s)
            await c.schedule_pass()
        ends = seed % 2 == 1
        if ends:
            running = [j.job_id for j in full.jobs.values() if j.state == js.RUNNING]
            for job_id in rng.sample(running, min(len(running), rng.randint(1, 2))):
                for c in (quick, full):
                    await end(c, c.jobs[job_id])
        probes = [_random_job(rng, nodes) for _ in range(3)]
        for s in probes:
            a = await quick.submit(ALICE, s)
            b = await full.submit(ALICE, s)
            assert a.job_id == b.job_id
            plan = schedule(full.snapshot())
            started = {st.job_id: st for st in plan.starts}
            if a.state == js.RUNNING:
                assert set(started) == {b.job_id}, (seed, started)
                assert sorted(p.node for p in started[b.job_id].placements) == sorted(
                    al.node for al in a.allocations
                )
                await full.apply_plan(plan, pass_no=99)  # the two stay alike
                continue
            if not ends:
                # nothing the last pass left waiting can start: only arrivals came,
                # so the short pass decided, and the full one agrees
                assert set(started) <= {b.job_id}, (seed, started)
                assert b.job_id not in started, (seed, started)
            # a pass makes both alike again (reasons, forecasts, what starts)
            await quick.schedule_pass()
            await full.schedule_pass()
    finally:
        await close(quick)
        await close(full)


async def test_after_an_end_a_job_starts_at_submit_unless_a_waiting_job_could(
    cluster: Cluster,
) -> None:
    top = await reserved_queue(cluster)  # n1 busy; a 2-node job reserved after it
    short = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert short.state == js.RUNNING  # n2's GPU 0
    await end(cluster, short)  # freed: nothing waiting fits in it (top needs n1 too)
    await settle(cluster)
    assert not cluster.state.versions.wake_event.is_set()  # a short pass saw that: no full one
    again = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert again.state == js.RUNNING and again.events[-1].cause == "sched:submit"
    # the job on n1 ends: top can start now, so a new job waits for the pass
    (first,) = [j for j in cluster.jobs.values() if j.nodelist == "n1" and j.state == js.RUNNING]
    await end(cluster, again)
    await settle(cluster)
    assert not cluster.state.versions.wake_event.is_set()  # top still needs n1
    await end(cluster, first)
    await settle(cluster)
    assert cluster.state.versions.wake_event.is_set()  # top may start now: a pass decides
    late = await cluster.submit(ALICE, spec(gpus_per_node=1, time_limit_s=60))
    assert late.state == js.PENDING and cluster.state.versions.wake_event.is_set()
    await cluster.schedule_pass()
    assert top.state == js.RUNNING


def test_the_simulator_starts_at_submit_as_ctld_does() -> None:
    # job 1 holds 2 of 4 procs until 100; job 2 (4 procs) is reserved from then; job 3
    # (1 proc, 50 s) fits before it and starts at submit; job 4 (1 proc, 200 s) would
    # delay it and waits for a pass
    trace = swf.parse(
        [
            "1 0 -1 100 2 -1 -1 2 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "2 10 -1 100 4 -1 -1 4 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "3 20 -1 50 1 -1 -1 1 50 -1 1 1 -1 -1 -1 -1 -1 -1",
            "4 30 -1 200 1 -1 -1 1 200 -1 1 1 -1 -1 -1 -1 -1 -1",
        ]
    )
    with_quick = replay(trace.jobs, 4, "corral")
    without = replay(trace.jobs, 4, "corral", quick=False)
    assert with_quick.quick_starts >= 1 and without.quick_starts == 0
    starts = {o.job.job_id: o.start for o in with_quick.outcomes}
    assert starts == {o.job.job_id: o.start for o in without.outcomes}
    assert starts[3] == 20 and starts[4] >= 100
    assert len(with_quick.pass_times) < len(without.pass_times)  # a pass fewer
