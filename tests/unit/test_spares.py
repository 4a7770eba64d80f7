"""Hot spares (ctld/ops/spares.py, the core's Placer): a partition's last N idle nodes go
only to jobs requeued after a node failure, which get one within one pass."""

from __future__ import annotations

import dataclasses
import pathlib

from google.protobuf.json_format import MessageToDict

from client.sinfo_columns import short_state
from client.views.node import Node
from corral.identity import Identity
from corral.testing.inprocess import ManualClock
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import JobRequest, PartitionView, Snapshot, schedule
from tests.unit.test_backfill import busy, node
from tests.unit.test_elastic import ALICE, make, settle, silence, spec

ROOT = Identity("root", 0, 0)


def snap(*jobs: JobRequest, nodes: tuple = ()) -> Snapshot:
    nodes = nodes or tuple(node(f"n{i}") for i in range(1, 5))
    return Snapshot(
        version=1,
        now=0.0,
        nodes=nodes,
        partitions=(PartitionView("p", tuple(n.name for n in nodes), spare_nodes=1),),
        pending=jobs,
    )


def whole(job_id: int, nodes: int, **kw: object) -> JobRequest:
    return JobRequest(job_id, ("p",), nodes_min=nodes, gpus_per_node=4, time_limit_s=60, **kw)  # type: ignore[arg-type]


def test_a_new_job_never_takes_the_last_idle_node() -> None:
    plan = schedule(snap(whole(1, 3), whole(2, 1)))
    (start,) = plan.starts
    assert [p.node for p in start.placements] == ["n1", "n2", "n3"]
    assert plan.reasons[2] == "Resources"
    # nor forecast (and reserved) on the spare now: after job 1, on one of its nodes
    assert plan.forecasts[2].start == 60.0 and plan.forecasts[2].nodes == ("n1",)


def test_a_job_requeued_after_a_failure_takes_the_spare() -> None:
    plan = schedule(snap(whole(1, 4, spares_ok=True)))
    assert [p.node for p in plan.starts[0].placements] == ["n1", "n2", "n3", "n4"]


def test_the_spare_is_the_last_idle_node_not_a_busy_one() -> None:
    nodes = (node("n1"), node("n2"), node("n3"), busy("n4", 4))
    plan = schedule(snap(whole(1, 2), whole(2, 1), nodes=nodes))
    assert [p.node for p in plan.starts[0].placements] == ["n1", "n2"]
    assert len(plan.starts) == 1  # n3, the last idle one, is kept


def test_a_claimed_node_is_never_the_spare() -> None:
    # job 1 ran on n2-n4 and lost n3; n2 is late: it cannot start yet. The spare is n1,
    # the last idle node it does not claim (n4 is its own): job 2 takes neither
    late = dataclasses.replace(node("n2"), schedulable=False)
    claim = {"reclaim": ("n2", "n4"), "reclaim_until": 60.0, "spares_ok": True}
    jobs = (whole(2, 1, priority=10), whole(1, 3, **claim))
    nodes = (node("n1"), late, busy("n3", 4), node("n4"))
    plan = schedule(snap(*jobs, nodes=nodes))
    assert plan.starts == ()
    assert set(plan.reasons) == {1, 2}
    # n2 heard again: job 1 starts on its nodes and the spare, job 2 still waits
    nodes = (node("n1"), node("n2"), busy("n3", 4), node("n4"))
    (start,) = schedule(snap(*jobs, nodes=nodes)).starts
    assert start.job_id == 1 and {p.node for p in start.placements} == {"n1", "n2", "n4"}
    # past its claim, it waits its turn: job 2 goes first (n4 is the spare again)
    plan = schedule(dataclasses.replace(snap(*jobs, nodes=nodes), now=61.0))
    assert [(s.job_id, s.placements[0].node) for s in plan.starts] == [(2, "n1")]


async def test_a_spare_replaces_a_failed_node_within_one_pass(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path, nodes=4, spare_nodes=1)
    job = await cluster.submit(ALICE, spec(nodes_min=3, cpus_per_task=8, requeue=True))
    other = await cluster.submit(ALICE, spec(cpus_per_task=8))
    await settle(cluster)
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n2", "n3"]
    assert other.state == js.PENDING  # n4 is the spare
    (n4,) = [n for n in cluster.queries.node_list(["n4"])]
    assert n4.spare and short_state(Node(MessageToDict(n4))) == "spare"
    await silence(cluster, clock, "n2", 11)
    assert job.state == js.PENDING and job.interruptions[-1].cause == "node_fail"
    await cluster.schedule_pass()  # one pass
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n3", "n4"]
    assert other.state == js.PENDING
    assert not any(n.spare for n in cluster.queries.node_list([]))  # no idle node left


async def test_spare_nodes_is_read_from_the_partition(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path, spare_nodes=2)
    spares = [n.name for n in cluster.queries.node_list([]) if n.spare]
    assert spares == ["n2", "n3"]
    assert pb.Node(spare=True).spare


async def _failed_over(
    tmp_path: pathlib.Path,
) -> tuple[Cluster, ManualClock, pb.Job, pb.Job]:
    """4 nodes, one spare: a 3-node --requeue job on n1-n3 and a queued 1-node job."""
    cluster, clock, _ = await make(tmp_path, nodes=4, spare_nodes=1)
    first = await cluster.submit(ALICE, spec(nodes_min=3, cpus_per_task=8, requeue=True))
    other = await cluster.submit(ALICE, spec(cpus_per_task=8))
    await settle(cluster)
    assert first.state == js.RUNNING and [a.node for a in first.allocations] == ["n1", "n2", "n3"]
    assert other.state == js.PENDING
    return cluster, clock, first, other


async def test_the_requeued_job_gets_its_nodes_before_a_higher_priority_job(
    tmp_path: pathlib.Path,
) -> None:
    # an operator puts the queued job above the failed one: the failed job's claim
    # still takes n1 and n3 back, and the spare, in the pass of the requeue
    cluster, clock, job, other = await _failed_over(tmp_path)
    raised = pb.UpdateJobRequest(
        job_ids=[other.job_id], action=pb.JOB_UPDATE_FIELDS, priority=job.priority + 1000
    )
    await cluster.update_hold(ROOT, raised)
    assert other.priority > job.priority
    await silence(cluster, clock, "n2", 11)
    assert job.state == js.PENDING and job.interruptions[-1].cause == "node_fail"
    await cluster.schedule_pass()
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n3", "n4"]
    assert other.state == js.PENDING


async def test_a_late_healthy_node_is_waited_for_not_given_away(tmp_path: pathlib.Path) -> None:
    # n1 (healthy) is late when n2 is declared DOWN: the job cannot start yet, and the
    # queued job must not take n3 meanwhile; n1 heard again, the job starts there
    cluster, clock, job, other = await _failed_over(tmp_path)
    for step in range(22):
        clock.advance(0.5)
        for name in ("n3", "n4") if step >= 18 else ("n1", "n3", "n4"):
            cluster.heartbeat(pb.HeartbeatRequest(name=name))
        await cluster.check_heartbeats()
    await settle(cluster)
    assert cluster.nodes["n1"].late and job.state == js.PENDING
    assert other.state == js.PENDING  # n3 is the failed job's, n4 the spare
    cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
    await settle(cluster)
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n3", "n4"]
    assert other.state == js.PENDING
