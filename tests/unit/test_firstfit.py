from ctld.sched import JobRequest, NodeView, PartitionView, Snapshot, schedule


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
