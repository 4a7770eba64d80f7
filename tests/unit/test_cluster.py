"""ctld's logic in-process: real store and state machine, recorded dispatch, manual clock."""

from __future__ import annotations

import asyncio

import pytest

from corral.config import parse_config
from corral.errors import (
    InvalidJobId,
    InvalidOption,
    InvalidPartition,
    NodeConfigUnavailable,
)
from corral.identity import Identity
from corral.testing.inprocess import (
    ManualClock,
    RecordingDispatcher,
    make_cluster,
    register_all,
    registration,
)
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js

CONFIG = parse_config(
    {
        "controller": {"operators": ["daemon"]},  # roles by uid: a real user
        "heartbeat": {"interval_s": 0.05, "timeout_s": 1.0},
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True, "max_time": "1:00:00"}],
    }
)
ALICE = Identity("alice", 1000, 1000)
BOB = Identity("bob", 1001, 1001)
ADMIN = Identity("daemon", 1, 1)


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
async def env(store_url: str):  # type: ignore[no-untyped-def]
    clock = ManualClock()
    disp = RecordingDispatcher()
    url = store_url
    cluster = make_cluster(CONFIG, url, clock=clock, dispatcher=disp)
    await register_all(cluster)
    yield cluster, clock, disp, url
    cluster.store.close()


async def drain(cluster: Cluster) -> None:
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def test_submit_is_durable_before_it_returns(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock, _, url = env
    job = await cluster.submit(ALICE, spec(time_limit_s=0))
    assert job.state == js.PENDING
    assert job.time_limit_s == 3600  # the partition's max_time stands in for a missing limit
    reloaded = make_cluster(CONFIG, url, clock=clock)
    assert reloaded.jobs[job.job_id].state == js.PENDING
    assert [e.event for e in reloaded.jobs[job.job_id].events] == ["submitted"]
    assert reloaded.next_job_id == job.job_id + 1
    reloaded.store.close()


async def test_schedule_launch_and_finish(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock, disp, _url = env
    job = await cluster.submit(ALICE, spec(gpus_per_node=2))
    await drain(cluster)
    assert job.state == js.RUNNING
    ((node, launch),) = disp.launched
    assert node == "n1" and list(launch.job.allocations[0].gpu_indices) == [0, 1]
    clock.advance(5)
    await cluster.report_status(
        pb.ReportJobStatusRequest(
            node="n1",
            updates=[
                pb.JobStatusUpdate(
                    job_id=job.job_id,
                    kind=pb.JobStatusUpdate.KIND_EXITED,
                    time=clock.now,
                    exit_code=3,
                )
            ],
        )
    )
    assert job.state == js.FAILED and job.exit_code == 3
    assert cluster.nodes["n1"].alloc_gpus == set()
    # a retried report of the same exit changes nothing
    await cluster.report_status(
        pb.ReportJobStatusRequest(
            node="n1",
            updates=[
                pb.JobStatusUpdate(
                    job_id=job.job_id, kind=pb.JobStatusUpdate.KIND_EXITED, exit_code=0
                )
            ],
        )
    )
    assert job.state == js.FAILED
    stored = cluster.store.query_jobs(
        job_ids=[job.job_id], users=[], states=[], start_after=0, end_before=0, limit=0
    )
    assert stored[0].state == js.FAILED and stored[0].end_time == clock.now


async def test_cancel_pending_running_and_permissions(env) -> None:  # type: ignore[no-untyped-def]
    cluster, _clock, disp, _ = env
    pending = await cluster.submit(ALICE, spec(hold=True))
    running = await cluster.submit(ALICE, spec())
    await drain(cluster)
    assert pending.reason == "JobHeldUser" and running.state == js.RUNNING

    denied = await cluster.cancel(
        BOB, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[pending.job_id]))
    )
    assert not denied[0].ok and denied[0].error == "PermissionDenied"
    assert pending.state == js.PENDING

    out = await cluster.cancel(
        ALICE,
        pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[pending.job_id, running.job_id, 999])),
    )
    assert {o.job_id: o.ok for o in out} == {999: False, pending.job_id: True, running.job_id: True}
    assert pending.state == js.CANCELLED
    assert running.state == js.COMPLETING
    await asyncio.gather(*list(cluster._tasks))
    assert disp.signalled[0][1].terminate
    await cluster.report_status(
        pb.ReportJobStatusRequest(
            node="n1",
            updates=[
                pb.JobStatusUpdate(
                    job_id=running.job_id,
                    kind=pb.JobStatusUpdate.KIND_EXITED,
                    exit_signal=15,
                    signalled_by_request=True,
                )
            ],
        )
    )
    assert running.state == js.CANCELLED and running.exit_signal == 15
    again = await cluster.cancel(
        ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[running.job_id]))
    )
    assert again[0].error == "JobStateConflict"


async def test_admin_hold_needs_an_operator_to_release(env) -> None:  # type: ignore[no-untyped-def]
    cluster, *_ = env
    job = await cluster.submit(ALICE, spec())
    hold = pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_HOLD)
    assert (await cluster.update_hold(ADMIN, hold))[0].ok
    assert job.reason == "JobHeldAdmin"
    release = pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_RELEASE)
    out = await cluster.update_hold(ALICE, release)
    assert out[0].error == "PermissionDenied"
    assert (await cluster.update_hold(ADMIN, release))[0].ok
    assert job.hold == pb.HOLD_NONE


async def test_an_arrays_id_holds_and_releases_each_of_its_tasks(env) -> None:  # type: ignore[no-untyped-def]
    # Slurm: scontrol hold/release N of an array acts on every task not yet ended
    cluster, *_ = env
    first = await cluster.submit(ALICE, spec(array="0-3", hold=True))
    array_id = first.array_job_id
    tasks = [cluster.jobs[array_id + i] for i in range(4)]
    assert all(t.hold != pb.HOLD_NONE for t in tasks)
    release = pb.UpdateJobRequest(job_ids=[array_id], action=pb.JOB_UPDATE_RELEASE)
    out = await cluster.update_hold(ALICE, release)
    assert [o.job_id for o in out] == [t.job_id for t in tasks] and all(o.ok for o in out)
    assert all(t.hold == pb.HOLD_NONE for t in tasks)
    # one task by its own job id: that task alone
    hold = pb.UpdateJobRequest(job_ids=[array_id + 2], action=pb.JOB_UPDATE_HOLD)
    assert [o.job_id for o in await cluster.update_hold(ALICE, hold)] == [array_id + 2]
    assert [t.hold != pb.HOLD_NONE for t in tasks] == [False, False, True, False]


async def test_a_user_may_only_lower_her_time_limit(env) -> None:  # type: ignore[no-untyped-def]
    # 0 (as -t 0), INFINITE and UNLIMITED (-1) are no limit: raises, an operator's
    cluster, *_ = env
    held = await cluster.submit(ALICE, spec(time_limit_s=600, hold=True))
    running = await cluster.submit(ALICE, spec(time_limit_s=600))
    await drain(cluster)
    assert running.state == js.RUNNING
    for job in (held, running):
        for limit in (0, -1, 601):
            req = pb.UpdateJobRequest(
                job_ids=[job.job_id], action=pb.JOB_UPDATE_FIELDS, time_limit_s=limit
            )
            (out,) = await cluster.update_hold(ALICE, req)
            assert out.error == "PermissionDenied", (job.job_id, limit)
            assert job.time_limit_s == 600
        lower = pb.UpdateJobRequest(
            job_ids=[job.job_id], action=pb.JOB_UPDATE_FIELDS, time_limit_s=300
        )
        assert (await cluster.update_hold(ALICE, lower))[0].ok and job.time_limit_s == 300
    req = pb.UpdateJobRequest(job_ids=[running.job_id], action=pb.JOB_UPDATE_FIELDS, time_limit_s=0)
    assert (await cluster.update_hold(ADMIN, req))[0].ok
    assert running.time_limit_s == -1  # an operator may lift it
    bad = pb.UpdateJobRequest(job_ids=[held.job_id], action=pb.JOB_UPDATE_FIELDS, time_limit_s=-5)
    assert (await cluster.update_hold(ADMIN, bad))[0].error == "InvalidRequest"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (spec(partitions=["nope"]), InvalidPartition),
        (spec(gpus_per_node=9), NodeConfigUnavailable),
        (spec(nodes_min=3), NodeConfigUnavailable),
        (spec(cpus_per_task=64), NodeConfigUnavailable),
        (spec(script="echo no shebang"), InvalidOption),
        (spec(work_dir="relative"), InvalidOption),
        (spec(dependency="afterwards:1"), InvalidOption),
        (spec(array="5-1"), InvalidOption),
        (spec(nodelist="n9"), Exception),
    ],
)
async def test_bad_submissions_create_no_job(
    env,
    bad: pb.JobSpec,  # type: ignore[no-untyped-def]
    error: type[Exception],
) -> None:
    cluster, *_ = env
    before = cluster.next_job_id
    with pytest.raises(error):
        await cluster.submit(ALICE, bad)
    assert cluster.next_job_id == before and not cluster.jobs


async def test_unreachable_node_requeues_the_job(env) -> None:  # type: ignore[no-untyped-def]
    cluster, _, disp, _ = env
    disp.fail_launch = True
    job = await cluster.submit(ALICE, spec())
    await drain(cluster)
    assert job.state == js.PENDING and job.restart_count == 1
    assert [e.event for e in job.events] == ["submitted", "started", "requeued"]
    # not answering once is NOT_RESPONDING ("idle*"), not DOWN: nothing more goes there
    assert cluster.nodes["n1"].to_wire().not_responding
    assert not cluster.nodes["n1"].schedulable
    assert cluster.nodes["n1"].job_ids == set()


async def test_heartbeat_timeout_marks_node_down(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock, *_ = env
    clock.advance(CONFIG.heartbeat.timeout_s + 1)
    task = asyncio.create_task(cluster.run_heartbeat_monitor())
    deadline = asyncio.get_running_loop().time() + 30
    while cluster.nodes["n1"].responding:
        assert asyncio.get_running_loop().time() < deadline
        # n2 is heard: n1's silence alone is n1's (both silent: ctld holds, liveness.py)
        assert cluster.heartbeat(pb.HeartbeatRequest(name="n2"))
        await asyncio.sleep(0.01)
    task.cancel()
    assert cluster.nodes["n1"].reason == "Not responding"
    # back from DOWN it must register again (and be fenced) before it is up
    assert not cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    await cluster.register_node(registration(cluster, "n1"))
    assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    assert cluster.nodes["n1"].responding


async def test_select_unknown_ids(env) -> None:  # type: ignore[no-untyped-def]
    cluster, *_ = env
    with pytest.raises(InvalidJobId):
        cluster.select(pb.JobFilter(job_ids=[12345]))


async def test_operator_cancel_records_who_and_paths_are_expanded(env) -> None:  # type: ignore[no-untyped-def]
    cluster, *_ = env
    job = await cluster.submit(ALICE, spec(stdout_pattern="out-%j-%N.txt", hold=True))
    assert not job.HasField("cancelled_by_uid")
    (outcome,) = await cluster.cancel(
        ADMIN, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id]))
    )
    assert outcome.ok and job.cancelled_by_uid == ADMIN.uid
    started = await cluster.submit(ALICE, spec(stdout_pattern="out-%j-%N.txt"))
    await drain(cluster)
    assert started.stdout_path == f"/tmp/out-{started.job_id}-n1.txt"
    assert started.stderr_path == started.stdout_path


async def test_holding_a_finished_job_is_refused(env) -> None:  # type: ignore[no-untyped-def]
    cluster, *_ = env
    job = await cluster.submit(ALICE, spec(hold=True))
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))
    out = await cluster.update_hold(
        ALICE, pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_HOLD)
    )
    assert out[0].message == "Job has already finished"


async def test_cached_job_json_follows_every_change(env) -> None:  # type: ignore[no-untyped-def]
    import json

    from google.protobuf import json_format

    from corral.config import AuthConfig
    from ctld.api.auth import ClusterAuthenticator
    from ctld.api.rpc import ControllerApi

    cluster, clock, *_ = env
    api = ControllerApi(cluster, ClusterAuthenticator(AuthConfig()))

    def fresh() -> list[dict[str, object]]:
        out = []
        for job in sorted(cluster.jobs.values(), key=lambda j: j.job_id):
            copy = pb.Job()
            copy.CopyFrom(job)
            del copy.events[:]
            copy.spec.ClearField("script")
            copy.spec.ClearField("environment")
            out.append(json_format.MessageToDict(copy))
        return out

    def served() -> list[dict[str, object]]:
        body = json.loads(api.get_jobs_json(pb.GetJobsRequest(), ALICE))
        return list(body.get("jobs", []))

    held = await cluster.submit(ALICE, spec(hold=True))
    later = await cluster.submit(ALICE, spec(begin_time=clock.now + 100))
    assert served() == fresh()
    await cluster.update_hold(
        ALICE, pb.UpdateJobRequest(job_ids=[held.job_id], action=pb.JOB_UPDATE_RELEASE)
    )
    await drain(cluster)
    assert later.reason == "BeginTime"
    assert served() == fresh()
    clock.advance(200)
    await drain(cluster)
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[held.job_id])))
    assert served() == fresh()


async def test_restarted_ctld_requeues_a_job_its_node_never_got(env) -> None:  # type: ignore[no-untyped-def]
    # ctld committed RUNNING, then died before the LaunchJob left: the node never ran it
    cluster, clock, _, url = env
    job = await cluster.submit(ALICE, spec(gpus_per_node=2))
    await drain(cluster)
    reloaded = make_cluster(CONFIG, url, clock=clock)
    await reloaded.register_node(registration(reloaded, "n1"))
    again = reloaded.jobs[job.job_id]
    assert again.state == js.PENDING and again.restart_count == 1
    assert again.events[-1].event == "requeued"
    assert again.events[-1].cause == "node:n1 registered without it"
    assert not reloaded.nodes["n1"].alloc_gpus  # its GPUs are free again
    assert make_cluster(CONFIG, url, clock=clock).jobs[job.job_id].state == js.PENDING
    reloaded.store.close()


async def test_registration_applies_unreported_exits_before_reconciling(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock, _, url = env
    job = await cluster.submit(ALICE, spec())
    await drain(cluster)
    reloaded = make_cluster(CONFIG, url, clock=clock)
    req = registration(reloaded, "n1")
    req.unreported.add(
        job_id=job.job_id, kind=pb.JobStatusUpdate.KIND_EXITED, exit_code=3, time=clock.now
    )
    await reloaded.register_node(req)
    again = reloaded.jobs[job.job_id]
    assert again.state == js.FAILED and again.exit_code == 3 and again.restart_count == 0


async def test_registration_keeps_running_jobs_and_launches_in_flight(env) -> None:  # type: ignore[no-untyped-def]
    cluster, _, disp, _ = env
    running = await cluster.submit(ALICE, spec())
    await drain(cluster)
    disp.hold_launches = True
    in_flight = await cluster.submit(ALICE, spec())
    await cluster.schedule_pass()
    assert in_flight.state == js.RUNNING and in_flight.batch_host == "n1"
    # the node registers (say after a network blip) while the second launch is on its way
    req = registration(cluster, "n1")
    req.running_job_ids.append(running.job_id)
    await cluster.register_node(req)
    assert running.state == js.RUNNING and in_flight.state == js.RUNNING
    disp.launch_gate.set()
    await drain(cluster)
    assert [r.job.job_id for _, r in disp.launched] == [running.job_id, in_flight.job_id]


async def test_registration_finishes_a_cancelled_job_the_node_no_longer_runs(env) -> None:  # type: ignore[no-untyped-def]
    cluster, *_ = env
    job = await cluster.submit(ALICE, spec())
    await drain(cluster)
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))
    assert job.state == js.COMPLETING
    await cluster.register_node(registration(cluster, "n1"))
    assert job.state == js.CANCELLED


def test_allow_groups_limits_who_may_submit() -> None:
    from corral.config import parse_config
    from corral.errors import InvalidPartition
    from ctld.model.validate import NodeCapacity, validate_spec

    cfg = parse_config(
        {
            "nodes": [{"names": "n1", "cpus": 4, "memory_mb": 1000}],
            "partitions": [{"name": "lab", "nodes": "n1", "allow_groups": ["ml"]}],
        }
    )
    cap = {"n1": NodeCapacity("n1", 4, 1000, 0, "")}
    with pytest.raises(InvalidPartition, match="group not permitted"):
        validate_spec(spec(partitions=["lab"]), cfg, cap, lambda: frozenset({"users"}))
    ok = validate_spec(spec(partitions=["lab"]), cfg, cap, lambda: frozenset({"ml", "users"}))
    assert ok.partitions == ("lab",)


async def test_uneven_tasks_count_as_asked(env) -> None:  # type: ignore[no-untyped-def]
    from noded.env import batch_environment

    cluster, *_ = env
    job = await cluster.submit(ALICE, spec(nodes_min=2, ntasks=5))
    assert job.num_tasks == 5
    await drain(cluster)
    environ = batch_environment(job, job.batch_host, "c")
    assert environ["SLURM_NTASKS"] == "5" and environ["SLURM_TASKS_PER_NODE"] == "3,2"


async def test_each_run_of_a_requeued_job_is_kept_for_sacct_duplicates(env) -> None:  # type: ignore[no-untyped-def]
    from corral.config import AuthConfig
    from ctld.api.auth import ClusterAuthenticator
    from ctld.api.rpc import ControllerApi

    cluster, clock, *_ = env
    job = await cluster.submit(ALICE, spec(gpus_per_node=2))
    await drain(cluster)
    first_start, first_nodes = job.start_time, job.nodelist
    clock.advance(30)
    await cluster.register_node(registration(cluster, job.batch_host))  # it lost the job
    assert job.state == js.PENDING and job.restart_count == 1
    clock.advance(5)
    await drain(cluster)
    assert job.state == js.RUNNING
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))

    (run,) = cluster.store.earlier_runs([job.job_id])
    # lost by its node: that run ended NODE_FAIL (docs/reliability.md)
    assert run.state == pb.JOB_STATE_NODE_FAIL and run.restart_count == 0
    assert run.start_time == first_start and run.nodelist == first_nodes
    assert run.end_time == first_start + 30
    assert not run.spec.script  # the job row keeps the script; a run needs none

    api = ControllerApi(cluster, ClusterAuthenticator(AuthConfig()))
    req = pb.QueryAccountingRequest(filter=pb.JobFilter(job_ids=[job.job_id]))
    plain = await api.query_accounting(req, ALICE)
    assert [j.restart_count for j in plain.jobs] == [1]
    req.duplicates = True
    both = await api.query_accounting(req, ALICE)
    assert [(j.job_id, j.restart_count) for j in both.jobs] == [(job.job_id, 0), (job.job_id, 1)]
    assert [j.state for j in both.jobs] == [pb.JOB_STATE_NODE_FAIL, job.state]


def _on_node_by_walk(cluster: Cluster) -> list[int]:
    walked = [j.job_id for j in cluster.jobs.values() if j.state in js.ON_NODE]
    # the index the snapshot, the monitor and the metrics read names exactly these
    assert cluster.state.index.on_node_ids == set(walked)
    return walked


async def test_arrays_and_running_jobs_are_found_by_index_not_by_walk(env) -> None:  # type: ignore[no-untyped-def]
    # scancel N, squeue -j N and each pass look jobs up through State's indexes (the
    # finished jobs kept for min_job_age are not walked): the indexes must name exactly
    # what a walk would, through starts, ends, the purge and a reload
    cluster, clock, _, url = env
    st = cluster.state
    first = await cluster.submit(ALICE, spec(array="0-3"))
    plain = await cluster.submit(ALICE, spec())
    array_id = first.array_job_id
    tasks = list(range(array_id, array_id + 4))
    assert [j.job_id for j in cluster.select(pb.JobFilter(job_ids=[array_id]))] == tasks
    named = cluster.select(pb.JobFilter(array_tasks=[f"{array_id}_2"]))
    assert [j.job_id for j in named] == [array_id + 2]
    await drain(cluster)
    assert [j.job_id for j in st.on_node()] == _on_node_by_walk(cluster) == [*tasks, plain.job_id]

    await cluster.report_status(
        pb.ReportJobStatusRequest(
            node=cluster.jobs[array_id].allocations[0].node,
            updates=[
                pb.JobStatusUpdate(
                    job_id=array_id, kind=pb.JobStatusUpdate.KIND_EXITED, time=clock.now
                )
            ],
        )
    )
    assert [j.job_id for j in st.on_node()] == _on_node_by_walk(cluster)
    assert array_id not in [j.job_id for j in st.on_node()]
    clock.advance(CONFIG.controller.min_job_age_s + 1)
    cluster.purge_finished()
    assert array_id not in cluster.jobs  # the array's first task is gone from memory
    assert st.index.array_tasks[array_id] == set(tasks[1:])
    # ... and its id still names the tasks left, as Slurm's scancel does
    outcomes = await cluster.cancel(
        ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[array_id]))
    )
    assert sorted(o.job_id for o in outcomes if o.ok) == tasks[1:]
    assert [j.job_id for j in st.on_node()] == _on_node_by_walk(cluster)  # COMPLETING
    await cluster.report_status(
        pb.ReportJobStatusRequest(
            node=cluster.jobs[tasks[1]].allocations[0].node,
            updates=[
                pb.JobStatusUpdate(
                    job_id=i, kind=pb.JobStatusUpdate.KIND_EXITED, time=clock.now, exit_signal=15
                )
                for i in tasks[1:]
            ],
        )
    )
    assert all(cluster.jobs[i].state == js.CANCELLED for i in tasks[1:])
    assert [j.job_id for j in st.on_node()] == _on_node_by_walk(cluster) == [plain.job_id]

    reloaded = make_cluster(CONFIG, url, clock=clock)
    try:
        assert reloaded.state.index.array_tasks == {array_id: set(tasks[1:])}
        assert [j.job_id for j in reloaded.state.on_node()] == [plain.job_id]
        assert reloaded.state.index.on_node_ids == {plain.job_id}
    finally:
        reloaded.store.close()
    clock.advance(CONFIG.controller.min_job_age_s + 1)
    cluster.purge_finished()
    assert array_id not in st.index.array_tasks
    (outcome,) = await cluster.cancel(
        ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[array_id]))
    )
    assert not outcome.ok  # nothing of the array is left: an unknown job id


async def test_get_jobs_pages_follow_filters_visibility_and_the_purge(env) -> None:  # type: ignore[no-untyped-def]
    # GetJobs pages by bisecting the sorted ids: each page must be what a walk of the
    # whole map gives, past the last id, with the filter and who may see what applied,
    # and the ids must follow jobs added and purged between pages
    cluster, clock, _, _ = env
    for who in (ALICE, BOB, ALICE, BOB, ALICE):
        await cluster.submit(who, spec(hold=True))

    def walk(flt: pb.JobFilter, after: int, limit: int, seen: set[str]) -> list[int]:
        ids = sorted(j.job_id for j in cluster.select(flt) if j.job_id > after and j.user in seen)
        return ids[:limit] if limit else ids

    def page(flt: pb.JobFilter, after: int, limit: int, seen: set[str]) -> list[int]:
        jobs = cluster.page_jobs(flt, after, limit, lambda j: j.user in seen)
        return [j.job_id for j in jobs]

    every = sorted(cluster.jobs)
    for flt in (pb.JobFilter(), pb.JobFilter(users=["alice"]), pb.JobFilter(job_ids=every[1:4])):
        for seen in ({"alice", "bob"}, {"bob"}):
            for after in (0, every[0], every[2], every[-1]):
                for limit in (0, 1, 2):
                    assert page(flt, after, limit, seen) == walk(flt, after, limit, seen)
    newer = await cluster.submit(ALICE, spec(hold=True))
    assert page(pb.JobFilter(), every[-1], 0, {"alice"}) == [newer.job_id]
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[every[0]])))
    clock.advance(CONFIG.controller.min_job_age_s + 1)
    cluster.purge_finished()
    assert every[0] not in cluster.jobs
    assert page(pb.JobFilter(), 0, 1, {"alice", "bob"}) == [every[1]]


def test_the_sorted_ids_follow_adds_in_any_order_and_the_forgotten() -> None:
    from ctld.core.state_parts import JobIndex

    index, jobs = JobIndex(), {}
    for job_id in (3, 1, 2):  # a load in any order
        jobs[job_id] = pb.Job(job_id=job_id)
        index.add(jobs[job_id])
    assert index.ids_sorted(jobs) == [1, 2, 3]
    for job_id in (10, 7):  # a new id is appended; a smaller one makes it sort again
        jobs[job_id] = pb.Job(job_id=job_id)
        index.add(jobs[job_id])
        assert index.ids_sorted(jobs) == sorted(jobs)
    index.forget(jobs.pop(2))  # a forgotten id may stay listed; readers skip it
    assert [i for i in index.ids_sorted(jobs) if i in jobs] == [1, 3, 7, 10]


async def test_sacct_json_is_the_grpc_answer_mapped(env) -> None:  # type: ignore[no-untyped-def]
    # the gateway encodes QueryAccounting's runs as read (a pending job's live record,
    # skipping what the answer leaves out); it must be the gRPC answer, mapped to JSON,
    # for every kind of run, with and without a mask, for the owner and for another user
    import json

    from google.protobuf.json_format import MessageToDict

    from client.acctfields import parse_acct_fields
    from client.fieldmasks import sacct_fields
    from client.sacct import DEFAULT_FIELDS
    from corral.config import AuthConfig
    from ctld.api.auth import ClusterAuthenticator
    from ctld.api.rpc import ControllerApi
    from ctld.codec import fieldmask

    cluster, clock, *_ = env
    requeued = await cluster.submit(ALICE, spec(gpus_per_node=2))
    await drain(cluster)
    clock.advance(30)
    await cluster.register_node(registration(cluster, requeued.batch_host))  # it lost the job
    await cluster.submit(ALICE, spec(hold=True, environment={"SECRET": "x"}))
    await cluster.submit(BOB, spec(hold=True))
    finished = await cluster.submit(BOB, spec())
    await drain(cluster)
    await cluster.cancel(BOB, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[finished.job_id])))
    api = ControllerApi(cluster, ClusterAuthenticator(AuthConfig()))
    names = [f.name for f in parse_acct_fields(DEFAULT_FIELDS)]
    for fields in ([], sacct_fields(names, steps=True, arrays=False) or [], ["job_id", "spec"]):
        for duplicates in (False, True):
            for who in (ALICE, BOB):
                req = pb.QueryAccountingRequest(fields=fields, duplicates=duplicates)
                body = json.loads(await api.call_json("QueryAccounting", req, who))
                mask = fieldmask.of_request("QueryAccounting", req)  # as call() answers
                if mask is None:
                    answer = await api.query_accounting(req, who)
                else:
                    whole = await api.query_accounting(
                        fieldmask.for_handler("QueryAccounting", req), who
                    )
                    answer = fieldmask.apply_to("QueryAccounting", mask, whole)
                assert body == MessageToDict(answer), (fields, duplicates, who)
                assert len(body["jobs"]) == 4 + duplicates
                assert "SECRET" not in json.dumps(body) and "script" not in json.dumps(body)
