"""Hot spares (ctld/spares.py, the core's Placer): a partition's last N idle nodes go
only to jobs requeued after a node failure, which get one within one pass."""

from __future__ import annotations

import pathlib

from google.protobuf.json_format import MessageToDict

from client.sinfo_columns import short_state
from client.views.node import Node
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.sched import JobRequest, PartitionView, Snapshot, schedule
from tests.unit.test_backfill import busy, node
from tests.unit.test_elastic import ALICE, make, settle, silence, spec


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


def test_a_job_requeued_after_a_failure_takes_the_spare() -> None:
    plan = schedule(snap(whole(1, 4, spares_ok=True)))
    assert [p.node for p in plan.starts[0].placements] == ["n1", "n2", "n3", "n4"]


def test_the_spare_is_the_last_idle_node_not_a_busy_one() -> None:
    nodes = (node("n1"), node("n2"), node("n3"), busy("n4", 4))
    plan = schedule(snap(whole(1, 2), whole(2, 1), nodes=nodes))
    assert [p.node for p in plan.starts[0].placements] == ["n1", "n2"]
    assert len(plan.starts) == 1  # n3, the last idle one, is kept


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
