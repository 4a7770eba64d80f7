"""client/views: a reply's fields as typed properties, with proto3's defaults for what a
reply leaves out (and the meaning an absent field has where that is not 0)."""

from __future__ import annotations

from client.views.accounting import Outcome
from client.views.job import Job
from client.views.node import Node, Partition
from client.views.step import StepStat


def test_a_job_reads_proto3_json_with_defaults() -> None:
    job = Job({"jobId": "7", "timeLimitS": "90", "memMb": "2048", "state": "JOB_STATE_RUNNING"})
    assert (job.job_id, job.time_limit_s, job.mem_mb) == (7, 90, 2048)  # int64 as strings
    assert (job.state_name, job.user, job.start_time, job.num_gpus) == ("RUNNING", "", 0.0, 0)
    assert Job({}).state_name == "PENDING" and Job({}).spec.name == ""
    assert Job({"timeLimitS": "oops"}).time_limit_s == 0  # never an exception mid-listing


def test_an_array_task_is_named_as_slurm_names_it() -> None:
    task = Job({"jobId": "12", "arrayJobId": "10", "arrayTaskId": 2})
    assert (task.ref, task.is_array_task) == ("10_2", True)
    first = Job({"jobId": "10", "arrayJobId": "10", "arrayTaskId": 0})  # task 0 is present
    assert (first.ref, Job({"jobId": "5"}).ref) == ("10_0", "5")


def test_absent_fields_keep_their_meaning() -> None:
    part = Partition({"name": "gpu"})
    assert (part.max_time_s, part.default_time_s, part.priority_tier) == (-1, -1, 1)
    assert part.state == "UP"
    res = Node({"resources": {"cpus": 8}}).resources
    assert (res.sockets, res.cores_per_socket, res.threads_per_core) == (1, 8, 1)
    assert Node({}).state_name == "UNKNOWN"
    assert Job({"uid": 5}).cancelled_by is None
    assert Job({"cancelledByUid": "0"}).cancelled_by == 0


def test_nested_views_and_outcomes() -> None:
    stat = StepStat({"step": "0", "nodes": [{"node": "n1", "live": {"maxVmemKb": "9"}}]})
    assert [(n.node, n.live.max_vmem_kb, n.live.usage.max_rss_kb) for n in stat.nodes] == [
        ("n1", 9, 0)
    ]
    assert Outcome({"jobId": "5_9", "message": "Invalid job id specified"}).job_ref == "5_9"
    assert Outcome({"jobId": 7, "ok": True}).job_ref == "7" and Outcome({}).job_ref == ""


def test_every_scalar_field_of_a_viewed_message_has_its_generated_property() -> None:
    # client/views' scalar properties come from the proto (corral/wire/views.py, made by
    # scripts/genwire.py): a field added to a message is readable without a hand edit
    from corral.wire import corral_pb2 as pb
    from corral.wire import views as generated

    for name in ("Job", "JobSpec", "Node", "Step", "StepSpec", "JobUsage", "Partition"):
        base = getattr(generated, f"{name}Fields")
        for field in pb.DESCRIPTOR.message_types_by_name[name].fields:
            if field.message_type is None:
                assert hasattr(base, field.name), f"{name}.{field.name}"
    assert Job({"arrayTaskId": 3, "state": "JOB_STATE_RUNNING"}).array_task_id == 3
    assert Job({}).state_name == "PENDING"  # the hand-written reading stays where it differs
