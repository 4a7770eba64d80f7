"""ctld on node failures, on virtual time: DOWN, requeue, NODE_FAIL, fencing, scontrol requeue."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from corral.config import parse_config
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

Update = pb.JobStatusUpdate
ALICE = Identity("alice", 1000, 1000)
ADMIN = Identity("daemon", 1, 1)


def config(**controller: Any) -> Any:
    return parse_config(
        {
            "controller": {"operators": ["daemon"], "administrators": ["daemon"], **controller},
            "heartbeat": {"interval_s": 1.0, "timeout_s": 10.0},
            "nodes": [{"names": "n[1-3]", "cpus": 8}],
            "partitions": [{"name": "p", "nodes": "n[1-3]", "default": True}],
        }
    )


def spec(**kw: Any) -> pb.JobSpec:
    base: dict[str, Any] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)


async def make(tmp_path: pathlib.Path, **controller: Any) -> tuple[Cluster, ManualClock, Any]:
    clock, disp = ManualClock(), RecordingDispatcher()
    cluster = make_cluster(
        config(**controller), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=disp
    )
    await register_all(cluster)
    return cluster, clock, disp


async def settle(cluster: Cluster) -> None:
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def start_two_node_job(cluster: Cluster, **kw: Any) -> pb.Job:
    job = await cluster.submit(ALICE, spec(nodes_min=2, **kw))
    await settle(cluster)
    assert job.state == js.RUNNING and len(job.allocations) == 2
    return job


async def silence(cluster: Cluster, clock: ManualClock, dead: str, seconds: float) -> None:
    """Every node but ``dead`` heartbeats while ``seconds`` pass; the monitor runs."""
    for _ in range(int(seconds * 2)):
        clock.advance(0.5)
        for name in cluster.nodes:
            if name != dead:
                cluster.heartbeat(pb.HeartbeatRequest(name=name))
        await cluster.check_heartbeats()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def test_late_then_down_requeues_and_kills_the_other_part(tmp_path: pathlib.Path) -> None:
    cluster, clock, disp = await make(tmp_path)
    job = await start_two_node_job(cluster, requeue=True)
    dead = job.batch_host
    other = next(a.node for a in job.allocations if a.node != dead)
    await silence(cluster, clock, dead, 2)
    node = cluster.nodes[dead]
    assert node.late and not node.down and node.to_wire().not_responding
    assert node.state == pb.NODE_STATE_ALLOCATED or node.state == pb.NODE_STATE_MIXED
    await silence(cluster, clock, dead, 9)
    assert node.down and node.state == pb.NODE_STATE_DOWN and node.reason == "Not responding"
    assert job.state == js.PENDING and job.restart_count == 1
    assert list(job.failed_nodes) == [dead]
    (run,) = cluster.store.earlier_runs([job.job_id])
    assert run.state == js.NODE_FAIL and run.nodelist and "DOWN" in run.reason
    kills = [(n, r) for n, r in disp.signalled if r.job_id == job.job_id]
    assert {n for n, _ in kills} == {dead, other}  # the dead one too: it may still answer
    assert all(r.terminate and r.kill_wait_s == 0 for _, r in kills)
    # placed again on the healthy nodes, without waiting for the dead one
    await settle(cluster)
    assert job.state == js.RUNNING and dead not in {a.node for a in job.allocations}
    launched = [r for _, r in disp.launched if r.job.job_id == job.job_id]
    assert launched[-1].job.restart_count == 1


async def test_no_requeue_ends_node_fail(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await start_two_node_job(cluster, no_requeue=True)
    await silence(cluster, clock, job.batch_host, 11)
    assert job.state == js.NODE_FAIL and job.reason == "NodeDown"
    assert all(not n.job_ids for n in cluster.nodes.values())


async def test_job_requeue_default_off_needs_requeue(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path, job_requeue=False)
    plain = await cluster.submit(ALICE, spec(nodelist="n1"))
    asked = await cluster.submit(ALICE, spec(nodelist="n1", requeue=True))
    await settle(cluster)
    await silence(cluster, clock, "n1", 11)
    assert plain.state == js.NODE_FAIL and asked.state == js.PENDING


async def test_requeue_delay_and_expedite(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path, requeue_delay_s=30)
    waiting = await cluster.submit(ALICE, spec(nodelist="n2", hold=True))
    job = await cluster.submit(ALICE, spec(nodelist="n1", requeue_expedite=True))
    await settle(cluster)
    await silence(cluster, clock, "n1", 11)
    assert job.state == js.PENDING and job.reason == "BeginTime"
    assert job.eligible_time == pytest.approx(clock.now + 30, abs=11)
    assert job.priority > waiting.priority


async def test_node_gone_across_a_ctld_restart_goes_down(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    cluster.store.close()
    # a new ctld on the same store: n1 never registers again
    clock.advance(100)
    again = make_cluster(config(), f"sqlite:///{tmp_path}/c.db", clock=clock)
    for name in ("n2", "n3"):
        await again.register_node(registration(again, name))
    assert again.nodes["n1"].state == pb.NODE_STATE_UNKNOWN
    await silence(again, clock, "n1", 11)
    assert again.nodes["n1"].state == pb.NODE_STATE_DOWN
    assert again.jobs[job.job_id].state == js.PENDING
    again.store.close()


async def test_a_node_back_from_down_is_fenced(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1,n2", nodes_min=2))
    stay = await cluster.submit(ALICE, spec(nodelist="n2"))
    await settle(cluster)
    await silence(cluster, clock, "n1", 11)
    assert job.state == js.PENDING
    # n1 heartbeats again: it must register first
    assert not cluster.heartbeat(pb.HeartbeatRequest(name="n1", running_job_ids=[job.job_id]))
    req = registration(cluster, "n1")
    req.running_job_ids.append(job.job_id)
    # the old copy's exit report, sent late, changes nothing
    req.unreported.append(Update(job_id=job.job_id, kind=Update.KIND_EXITED, exit_code=0))
    await cluster.register_node(req)
    assert cluster.jobs_kept_by("n1") == [] and cluster.jobs_kept_by("n2") == [stay.job_id]
    node = cluster.nodes["n1"]
    assert node.fencing and not node.schedulable and job.state == js.PENDING
    assert cluster.heartbeat(pb.HeartbeatRequest(name="n1", running_job_ids=[job.job_id]))
    assert node.fencing
    assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    assert not node.fencing and node.schedulable


async def test_stale_and_lost_reports(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    node = job.batch_host
    stale = Update(job_id=job.job_id, kind=Update.KIND_EXITED, restart_count=5)
    await cluster.report_status(pb.ReportJobStatusRequest(node=node, updates=[stale]))
    assert job.state == js.RUNNING
    lost = Update(
        job_id=job.job_id,
        kind=Update.KIND_EXITED,
        exit_signal=9,
        end_reason=Update.END_NODE_FAIL,
        detail="noded restarted",
    )
    await cluster.report_status(pb.ReportJobStatusRequest(node=node, updates=[lost]))
    assert job.state == js.PENDING and job.restart_count == 1
    assert cluster.store.earlier_runs([job.job_id])[0].reason == "noded restarted"


async def test_a_stall_reported_by_any_node_of_the_job_requeues_it(tmp_path: pathlib.Path) -> None:
    cluster, _, disp = await make(tmp_path)
    job = await start_two_node_job(cluster)
    other = next(a.node for a in job.allocations if a.node != job.batch_host)
    outside = next(n for n in cluster.nodes if n not in {a.node for a in job.allocations})
    why = f"progress stalled on node {other} rank 1 (step {job.job_id}.0): no heartbeat for 9s"
    stall = Update(
        job_id=job.job_id, step_id=0, kind=Update.KIND_EXITED, end_reason=Update.END_STALLED
    )
    stall.detail = why
    for node, run in ((outside, 0), (other, 3)):  # not its node; an earlier run
        stall.restart_count = run
        await cluster.report_status(pb.ReportJobStatusRequest(node=node, updates=[stall]))
        assert job.state == js.RUNNING
    stall.restart_count = 0
    await cluster.report_status(pb.ReportJobStatusRequest(node=other, updates=[stall]))
    assert job.state == js.PENDING and job.restart_count == 1
    (run,) = cluster.store.earlier_runs([job.job_id])
    assert run.state == js.NODE_FAIL and run.reason == why
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    kills = {n for n, r in disp.signalled if r.job_id == job.job_id and r.terminate}
    assert kills == {a.node for a in run.allocations}  # every part of it stopped


async def test_scontrol_requeue_and_requeuehold(tmp_path: pathlib.Path) -> None:
    cluster, _, disp = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    for action, hold in (
        (pb.JOB_UPDATE_REQUEUE, pb.HOLD_NONE),
        (pb.JOB_UPDATE_REQUEUE_HOLD, pb.HOLD_USER),
    ):
        (out,) = await cluster.update_hold(
            ALICE, pb.UpdateJobRequest(job_ids=[job.job_id], action=action)
        )
        assert out.ok
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
        assert disp.signalled[-1][1].terminate and job.state == js.RUNNING
        done = Update(
            job_id=job.job_id,
            kind=Update.KIND_EXITED,
            exit_signal=15,
            restart_count=job.restart_count,
        )
        await cluster.report_status(pb.ReportJobStatusRequest(node="n1", updates=[done]))
        assert job.state == js.PENDING and job.hold == hold
        assert cluster.store.earlier_runs([job.job_id])[-1].state == pb.JOB_STATE_REQUEUED
        if hold == pb.HOLD_NONE:
            await settle(cluster)
            assert job.state == js.RUNNING
    (out,) = await cluster.update_hold(
        ALICE, pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_REQUEUE)
    )
    assert not out.ok and "pending" in out.message


async def test_operator_down_requeues_now_and_resume_reregisters(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=["n1"], state="DOWN", reason="fan"))
    node = cluster.nodes["n1"]
    assert node.state == pb.NODE_STATE_DOWN and node.reason == "fan" and job.state == js.PENDING
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=["n1"], state="RESUME"))
    assert not node.down and not cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    await cluster.register_node(registration(cluster, "n1"))
    assert node.schedulable


async def restart(cluster: Cluster, clock: ManualClock, tmp_path: pathlib.Path) -> Any:
    """A new ctld on the same store (the old one gone without a word), nodes registered."""
    cluster.store.close()
    disp = RecordingDispatcher()
    again = make_cluster(config(), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=disp)
    return again, disp


@pytest.mark.parametrize(
    ("action", "hold"),
    [(pb.JOB_UPDATE_REQUEUE, pb.HOLD_NONE), (pb.JOB_UPDATE_REQUEUE_HOLD, pb.HOLD_ADMIN)],
)
async def test_a_requeue_asked_survives_a_ctld_restart(
    tmp_path: pathlib.Path, action: int, hold: int
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    (out,) = await cluster.update_hold(
        ADMIN, pb.UpdateJobRequest(job_ids=[job.job_id], action=action)
    )
    assert out.ok and job.state == js.RUNNING
    again, disp = await restart(cluster, clock, tmp_path)
    # the node still runs it: the kill is sent again, then its exit report requeues it
    req = registration(again, "n1")
    req.running_job_ids.append(job.job_id)
    await again.register_node(req)
    while again._tasks:
        await asyncio.gather(*list(again._tasks))
    assert [(n, r.job_id, r.terminate) for n, r in disp.signalled] == [("n1", job.job_id, True)]
    done = Update(
        job_id=job.job_id, kind=Update.KIND_EXITED, exit_signal=15, signalled_by_request=True
    )
    await again.report_status(pb.ReportJobStatusRequest(node="n1", updates=[done]))
    now = again.jobs[job.job_id]
    assert now.state == js.PENDING and now.restart_count == 1 and now.hold == hold
    assert not now.requeue_on_exit
    assert again.store.earlier_runs([job.job_id])[-1].state == pb.JOB_STATE_REQUEUED
    again.store.close()


async def test_a_requeuehold_whose_job_vanished_meanwhile_is_requeued_held(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodelist="n1"))
    await settle(cluster)
    hold = pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_REQUEUE_HOLD)
    (out,) = await cluster.update_hold(ALICE, hold)
    assert out.ok
    again, _ = await restart(cluster, clock, tmp_path)
    await again.register_node(registration(again, "n1"))  # it self-fenced: no job, no report
    now = again.jobs[job.job_id]
    assert now.state == js.PENDING and now.hold == pb.HOLD_USER and now.restart_count == 1
    assert again.store.earlier_runs([job.job_id])[-1].state == pb.JOB_STATE_REQUEUED
    again.store.close()


async def test_an_operators_down_survives_a_ctld_restart(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=["n1"], state="DOWN", reason="fan"))
    again, _ = await restart(cluster, clock, tmp_path)
    await register_all(again)
    node = again.nodes["n1"]
    assert node.state == pb.NODE_STATE_DOWN and node.reason == "fan" and not node.schedulable
    assert not node.to_wire().not_responding  # an operator's DOWN, not a silent node
    assert again.heartbeat(pb.HeartbeatRequest(name="n1"))
    await again.update_node(ADMIN, pb.UpdateNodeRequest(names=["n1"], state="RESUME"))
    await again.register_node(registration(again, "n1"))
    assert node.schedulable
    third, _ = await restart(again, clock, tmp_path)
    await register_all(third)
    assert third.nodes["n1"].schedulable  # RESUME was durable too
    third.store.close()


async def test_signal_before_a_maintenance_reservation(tmp_path: pathlib.Path) -> None:
    cluster, clock, disp = await make(tmp_path)
    warned = await cluster.submit(ALICE, spec(nodelist="n1", signal="B:USR1@60"))
    quiet = await cluster.submit(ALICE, spec(nodelist="n2", signal="USR1@60"))
    await settle(cluster)
    maint = pb.Reservation(
        name="fix",
        start_time=clock.now + 120,
        duration_s=600,
        nodes="n1",
        users=["root"],
        flags=["MAINT"],
    )
    await cluster.create_reservation(ADMIN, maint)
    await cluster.monitor.warn_maintenance()
    assert not [r for _, r in disp.signalled if r.signal == 10]  # two minutes away
    clock.advance(70)
    for _ in range(2):  # once only
        await cluster.monitor.warn_maintenance()
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
    sent = [(n, r) for n, r in disp.signalled if r.signal == 10]
    want = pb.SignalJobRequest(job_id=warned.job_id, signal=10, batch_only=True, run=0)
    assert sent == [("n1", want)]
    assert quiet.state == js.RUNNING


async def stall_on(cluster: Cluster, job: pb.Job, node: str) -> None:
    stall = Update(
        job_id=job.job_id, step_id=0, kind=Update.KIND_EXITED, end_reason=Update.END_STALLED
    )
    stall.detail = f"progress stalled on node {node} rank 0"
    stall.restart_count = job.restart_count
    await cluster.report_status(pb.ReportJobStatusRequest(node=node, updates=[stall]))
    assert job.state == js.PENDING
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def test_a_requeued_job_is_placed_away_from_the_node_it_failed_on(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(requeue=True))
    await settle(cluster)
    seen = {job.batch_host}
    for _ in range(2):  # each failed node is avoided while others remain
        await stall_on(cluster, job, job.batch_host)
        clock.advance(3600)  # past any requeue delay
        await settle(cluster)
        assert job.state == js.RUNNING and job.batch_host not in seen, (job.batch_host, seen)
        seen.add(job.batch_host)
    # every node has failed it now: none is held against it, it still runs
    await stall_on(cluster, job, job.batch_host)
    clock.advance(3600)
    await settle(cluster)
    assert job.state == js.RUNNING and sorted(job.failed_nodes) == sorted(cluster.nodes)


async def test_avoiding_a_failed_node_never_strands_a_job_that_needs_it(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodes_min=3, requeue=True))
    await settle(cluster)
    assert job.state == js.RUNNING
    await stall_on(cluster, job, job.allocations[1].node)
    clock.advance(3600)
    await settle(cluster)
    assert job.state == js.RUNNING and len(job.allocations) == 3
