"""srun lost a node's noded mid-step: the job's end waits for the node's verdict
(ctld/ops/suspects.py), on virtual time. The real-process version of each case is in
tests/integration/test_step_node_loss.py."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from corral.errors import JobStateConflict, PermissionDenied
from corral.identity import Identity
from corral.testing.inprocess import registration
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from tests.unit.test_node_failure import ALICE, make, restart, settle, silence, spec

Update = pb.JobStatusUpdate
BOB = Identity("bob", 1001, 1001)


async def running_step(cluster: Cluster, **kw: Any) -> tuple[pb.Job, str]:
    """A 2-node job with a step on both nodes; (the job, the node that is not its batch
    host)."""
    job = await cluster.submit(ALICE, spec(nodes_min=2, **kw))
    await settle(cluster)
    assert job.state == js.RUNNING
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id, argv=["train"]))
    other = next(a.node for a in job.allocations if a.node != job.batch_host)
    return job, other


def lost(job: pb.Job, node: str, **kw: Any) -> pb.StepNodeLostRequest:
    base: dict[str, Any] = {"job_id": job.job_id, "step_id": 0, "node": node}
    base.update(kw)
    return pb.StepNodeLostRequest(**base)


async def script_exits(cluster: Cluster, job: pb.Job, code: int = 137) -> None:
    """The batch script ends (srun killed the other ranks and failed): noded's report."""
    usage = pb.JobUsage(max_rss_kb=4242)
    end = Update(job_id=job.job_id, kind=Update.KIND_EXITED, exit_code=code, usage=usage)
    await cluster.report_status(pb.ReportJobStatusRequest(node=job.batch_host, updates=[end]))


async def drain(cluster: Cluster) -> None:
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def test_the_end_waits_and_a_node_down_requeues_the_job(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    await cluster.step_node_lost(ALICE, lost(job, other, detail="connection lost"))
    assert [s.node for s in job.suspect_nodes] == [other]
    await script_exits(cluster, job)
    assert job.state == js.RUNNING and job.held_end.exit_code == 137  # not FAILED
    assert "waits for the verdict" in job.events[-1].detail
    await silence(cluster, clock, other, 11)  # its noded is dead: DOWN at the timeout
    assert job.state == js.PENDING and job.restart_count == 1
    assert not job.suspect_nodes and not job.HasField("held_end")
    (run,) = cluster.store.earlier_runs([job.job_id])
    assert run.state == js.NODE_FAIL and other in run.reason and "DOWN" in run.reason
    assert run.usage.max_rss_kb == 4242  # the script's usage, from the held report
    assert list(job.failed_nodes) == [other]


async def test_without_requeue_the_job_ends_node_fail(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, no_requeue=True)
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job)
    await silence(cluster, clock, other, 11)
    assert job.state == js.NODE_FAIL and job.reason == "NodeDown"
    assert all(not n.job_ids for n in cluster.nodes.values())


async def test_a_restarted_noded_is_a_node_failure_when_it_registers(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, disp = await make(tmp_path)
    first = registration(cluster, "n2")
    first.instance = "aaa"
    await cluster.register_node(first)
    job, other = await running_step(cluster, requeue=True, nodelist="n[1-2]")
    assert other == "n2"
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job)
    again = registration(cluster, "n2")
    again.instance = "aaa"  # the same noded registering again (a ctld hiccup): alive
    await cluster.register_node(again)
    assert job.state == js.RUNNING and job.suspect_nodes
    again.instance = "bbb"  # a new noded: the old one's tasks were killed before this
    await cluster.register_node(again)
    assert job.state == js.PENDING and job.restart_count == 1
    (run,) = cluster.store.earlier_runs([job.job_id])
    assert run.state == js.NODE_FAIL and "noded on n2 restarted" in run.reason
    await drain(cluster)
    kills = {n for n, r in disp.signalled if r.job_id == job.job_id and r.terminate}
    assert kills == {"n1", "n2"}


async def test_a_node_that_reports_its_part_ended_is_alive_and_the_end_stands(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job, code=3)
    assert job.state == js.RUNNING
    part = Update(job_id=job.job_id, kind=Update.KIND_STEP_ENDED, step_id=0, exit_signal=9)
    await cluster.report_status(pb.ReportJobStatusRequest(node=other, updates=[part]))
    assert job.state == js.FAILED and job.exit_code == 3 and job.restart_count == 0


async def test_a_node_that_heartbeats_on_is_judged_alive_after_the_timeout(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job, code=0)
    await silence(cluster, clock, "nobody", 9)  # every node heartbeats: not yet
    assert job.state == js.RUNNING
    await silence(cluster, clock, "nobody", 2.5)
    assert job.state == js.COMPLETED and not job.suspect_nodes


async def test_a_node_already_done_or_a_stale_report_is_no_suspect(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    part = Update(job_id=job.job_id, kind=Update.KIND_STEP_ENDED, step_id=0, exit_signal=9)
    await cluster.report_status(pb.ReportJobStatusRequest(node=other, updates=[part]))
    await cluster.step_node_lost(ALICE, lost(job, other))  # its noded said so: alive
    await cluster.step_node_lost(ALICE, lost(job, job.batch_host, run=1))  # another run
    assert not job.suspect_nodes
    with pytest.raises(PermissionDenied):
        await cluster.step_node_lost(BOB, lost(job, job.batch_host))
    with pytest.raises(JobStateConflict):
        await cluster.step_node_lost(ALICE, lost(job, "n3"))  # no tasks there
    await script_exits(cluster, job, code=1)
    assert job.state == js.FAILED  # nothing suspect: the end applies at once


async def test_a_cancel_while_the_end_waits_ends_the_job_now(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job)
    outcome = await cluster.cancel(ALICE, pb.CancelJobsRequest(filter={"job_ids": [job.job_id]}))
    assert outcome[0].ok
    assert job.state == js.CANCELLED and not job.suspect_nodes


async def test_a_held_end_and_its_suspect_survive_a_ctld_restart(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    cluster.nodes[other].instance = "aaa"
    await cluster.step_node_lost(ALICE, lost(job, other))
    await script_exits(cluster, job)
    again, _ = await restart(cluster, clock, tmp_path)
    # the batch host registers without the job: its end is held, it is not "missing"
    await again.register_node(registration(again, job.batch_host))
    now = again.jobs[job.job_id]
    assert now.state == js.RUNNING and now.held_end.exit_code == 137
    later = registration(again, other)
    later.instance = "bbb"  # restarted while ctld was away
    await again.register_node(later)
    assert now.state == js.PENDING and now.restart_count == 1
    again.store.close()


async def test_an_allocations_release_waits_too_and_ends_node_fail(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, allocation_only=True, script="")
    await cluster.step_node_lost(ALICE, lost(job, other))
    await cluster.complete_job(ALICE, pb.CompleteJobRequest(job_id=job.job_id, exit_code=137))
    assert job.state == js.RUNNING
    await silence(cluster, clock, other, 11)
    assert job.state == js.NODE_FAIL


async def test_a_requeue_waits_for_another_unjudged_suspects_fence(
    tmp_path: pathlib.Path,
) -> None:
    """Two nodes lost: the first DOWN requeues the job, but not to run before the second's
    fence guard has killed the old ranks there (timeout_s after srun lost it)."""
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, spec(nodes_min=3, requeue=True))
    await settle(cluster)
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id, argv=["train"]))
    first, second = (a.node for a in job.allocations if a.node != job.batch_host)
    await cluster.step_node_lost(ALICE, lost(job, first))
    await silence(cluster, clock, first, 5)
    await cluster.step_node_lost(ALICE, lost(job, second))
    since = job.suspect_nodes[1].since
    await silence(cluster, clock, first, 6)  # the first is DOWN now
    assert job.state == js.PENDING and job.eligible_time == since + 10
    assert job.reason == "BeginTime"
    await cluster.register_node(registration(cluster, first))  # back: only time holds it
    await settle(cluster)
    assert job.state == js.PENDING
    clock.advance(since + 10 - clock.now)
    await settle(cluster)
    assert job.state == js.RUNNING


async def test_a_report_after_the_restarted_noded_registered_is_a_node_failure_at_once(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job, other = await running_step(cluster, requeue=True)
    clock.advance(1)
    node = registration(cluster, other)
    node.instance = "new"  # n2 was registered without one: not known to be a restart
    await cluster.register_node(node)
    assert cluster.nodes[other].restarted_at == 0
    node.instance = "newer"  # another noded than the known one: a restart
    await cluster.register_node(node)
    assert job.state == js.RUNNING  # nothing suspected it yet
    await cluster.step_node_lost(ALICE, lost(job, other))  # srun's word came late
    assert job.state == js.PENDING and job.restart_count == 1
