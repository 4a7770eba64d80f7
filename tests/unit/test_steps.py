"""Step layout: which nodes, which ranks where, which GPUs each task sees."""

from __future__ import annotations

import pytest

from corral.errors import InvalidOption, StepLayoutError
from corral.tasks import task_gpus, validate_gpu_bind
from corral.wire import corral_pb2 as pb
from ctld.jobs.steps import plan_step


def job(nodes: int = 2, gpus: int = 4, cpus: int = 8, tasks: int = 0) -> pb.Job:
    j = pb.Job(job_id=5, num_tasks=tasks)
    for i in range(nodes):
        j.allocations.add(node=f"n{i + 1}", cpus=cpus, gpu_indices=range(gpus))
    return j


def layout(j: pb.Job, **kw: object) -> list[tuple[str, list[int]]]:
    nodes = plan_step(j, pb.StepSpec(**kw), {"n1": "10.0.0.2:1"})  # type: ignore[arg-type]
    return [(n.node, list(n.ranks)) for n in nodes]


def test_defaults_use_every_node_one_task_each_or_the_jobs_count() -> None:
    assert layout(job()) == [("n1", [0]), ("n2", [1])]
    assert layout(job(tasks=4)) == [("n1", [0, 1]), ("n2", [2, 3])]


def test_block_and_cyclic_distribution() -> None:
    assert layout(job(), ntasks=4) == [("n1", [0, 1]), ("n2", [2, 3])]
    assert layout(job(), ntasks=4, distribution="cyclic") == [("n1", [0, 2]), ("n2", [1, 3])]
    assert layout(job(), ntasks=3) == [("n1", [0, 1]), ("n2", [2])]
    with pytest.raises(InvalidOption):
        layout(job(), ntasks=4, distribution="plane")


def test_node_subsets() -> None:
    assert layout(job(), ntasks=1) == [("n1", [0])]
    assert layout(job(), num_nodes=1, ntasks=3) == [("n1", [0, 1, 2])]
    assert layout(job(), nodelist="n2") == [("n2", [0])]
    assert layout(job(), exclude="n1", ntasks=2) == [("n2", [0, 1])]
    assert layout(job(), ntasks_per_node=2) == [("n1", [0, 1]), ("n2", [2, 3])]
    for bad in ({"num_nodes": 3}, {"nodelist": "n9"}, {"ntasks": 1, "num_nodes": 2}):
        with pytest.raises(StepLayoutError, match="not available"):
            layout(job(), **bad)
    with pytest.raises(StepLayoutError, match="more than 2 node"):
        layout(job(), ntasks=5, ntasks_per_node=2)


def test_resources_per_task_must_fit_the_job_on_each_node() -> None:
    assert layout(job(), ntasks=4, gpus_per_task=2)
    with pytest.raises(StepLayoutError, match="GPU"):
        layout(job(), ntasks=4, gpus_per_task=4)
    with pytest.raises(StepLayoutError, match="CPU"):
        layout(job(cpus=2), ntasks=4, cpus_per_task=2)


def test_addresses_come_along() -> None:
    (first, second) = plan_step(job(), pb.StepSpec(), {"n1": "10.0.0.2:1"})
    assert first.address == "10.0.0.2:1" and first.node_id == 0 and second.node_id == 1


def test_each_task_sees_its_gpus() -> None:
    node = pb.StepNode(gpu_indices=[4, 5, 6, 7])
    assert task_gpus(node, pb.StepSpec(gpus_per_task=2), 1) == [6, 7]
    assert task_gpus(node, pb.StepSpec(gpus_per_task=2, gpu_bind="none"), 1) == [4, 5, 6, 7]
    assert task_gpus(node, pb.StepSpec(gpu_bind="map_gpu:7,4"), 2) == [7]
    assert task_gpus(node, pb.StepSpec(), 3) == [4, 5, 6, 7]
    validate_gpu_bind("map_gpu:0,1")
    for bad in ("map_gpu:", "map_gpu:a", "mask_gpu:0x3"):
        with pytest.raises(InvalidOption):
            validate_gpu_bind(bad)


def test_steps_hold_the_allocation_unless_exact_or_overlap() -> None:
    from corral.errors import StepBusy
    from ctld.jobs.steps import holdings

    j = job(nodes=1, gpus=4, cpus=4)
    whole = pb.Step(spec=pb.StepSpec(), nodes=plan_step(j, pb.StepSpec(), {}))
    held = holdings(whole)
    assert held == {"n1": (4, {0, 1, 2, 3})}
    with pytest.raises(StepBusy):
        plan_step(j, pb.StepSpec(exact=True), {}, held)
    assert plan_step(j, pb.StepSpec(overlap=True), {}, held)
    exact = pb.StepSpec(exact=True, ntasks=2, gpus_per_task=1)
    (first,) = plan_step(j, exact, {})
    assert first.cpus == 2 and list(first.gpu_indices) == [0, 1]
    held = holdings(pb.Step(spec=exact, nodes=[first]))
    (second,) = plan_step(j, exact, {}, held)
    assert list(second.gpu_indices) == [2, 3]  # the GPUs the first does not hold
    with pytest.raises(StepBusy, match="GPUs free"):
        plan_step(j, pb.StepSpec(exact=True, ntasks=1, gpus_per_task=3), {}, held)
    assert holdings(pb.Step(spec=pb.StepSpec(exact=True), nodes=[first])) == {"n1": (2, set())}
