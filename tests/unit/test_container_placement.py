"""A job that runs in a container (--container-image) is placed only on nodes with the
``container`` feature (its runtime), waits BadConstraints where no node has it, and
the feature is in the request's class (validate.request_from_spec derives it)."""

from __future__ import annotations

from dataclasses import replace

from corral.reasons import Reason
from corral.wire import corral_pb2 as pb
from ctld.model import validate
from ctld.sched import JobRequest, NodeView, PartitionView, Snapshot, schedule

CONTAINER = ("container",)


def node(name: str, *features: str, up: bool = True) -> NodeView:
    return NodeView(
        name=name,
        cpus_total=8,
        mem_total_mb=1000,
        gpus_total=0,
        cpus_free=8,
        mem_free_mb=1000,
        gpus_free=(),
        schedulable=up,
        features=frozenset(features),
    )


def snap(*jobs: JobRequest, nodes: tuple[NodeView, ...]) -> Snapshot:
    return Snapshot(
        version=1,
        now=0.0,
        nodes=nodes,
        partitions=(PartitionView("p", tuple(n.name for n in nodes)),),
        pending=jobs,
    )


def test_a_container_job_goes_only_where_the_runtime_is() -> None:
    nodes = (node("bare1"), node("bare2"), node("ctr", "container"))
    plan = schedule(snap(JobRequest(1, ("p",), features=CONTAINER), nodes=nodes))
    assert [p.node for s in plan.starts for p in s.placements] == ["ctr"]
    # two nodes' worth: one has the runtime, so it waits (Resources, not BadConstraints)
    plan = schedule(snap(JobRequest(2, ("p",), nodes_min=2, features=CONTAINER), nodes=nodes))
    assert not plan.starts and plan.reasons[2] == Reason.RESOURCES


def test_no_node_with_the_feature_is_bad_constraints() -> None:
    plan = schedule(snap(JobRequest(1, ("p",), features=CONTAINER), nodes=(node("a"), node("b"))))
    assert not plan.starts and plan.reasons[1] == Reason.BAD_CONSTRAINTS
    assert Reason.BAD_CONSTRAINTS == "BadConstraints"  # Slurm's name for squeue %r


def test_the_only_container_node_down_is_nodes_down() -> None:
    nodes = (node("a"), node("ctr", "container", up=False))
    plan = schedule(snap(JobRequest(1, ("p",), features=CONTAINER), nodes=nodes))
    assert not plan.starts and plan.reasons[1] == Reason.NODES_DOWN


def test_a_plain_job_still_runs_anywhere() -> None:
    plan = schedule(snap(JobRequest(1, ("p",)), nodes=(node("a"),)))
    assert [p.node for s in plan.starts for p in s.placements] == ["a"]


def test_the_request_of_a_container_spec_needs_the_feature_and_is_its_own_class() -> None:
    spec = pb.JobSpec()
    plain = validate.request_from_spec(spec, 1, ("p",))
    spec.container.image = "ubuntu"
    boxed = validate.request_from_spec(spec, 2, ("p",))
    named = validate.request_from_spec(pb.JobSpec(container=pb.ContainerSpec(name="k")), 3)
    assert (plain.features, boxed.features, named.features) == ((), CONTAINER, CONTAINER)
    assert plain.klass != boxed.klass
    assert replace(boxed, job_id=9).klass == boxed.klass
