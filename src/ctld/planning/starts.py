"""The fields a job's start sets (the plan applier commits them with the start):
where it runs, what it holds, its output paths, an elastic job's task count, and the
marks ETTR counts from (corral/ettr.py)."""

from __future__ import annotations

from corral import hostlist
from corral.patterns import batch_output_paths
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.sched import Start


def started_fields(job: pb.Job, start: Start, now: float) -> js.Fields:
    """The fields a start sets: where the job runs, what it holds there, its output."""
    places = start.placements
    batch_host = places[0].node
    stdout, stderr = batch_output_paths(
        job_id=job.job_id,
        job_name=job.spec.name,
        user=job.user,
        node=batch_host,
        work_dir=job.spec.work_dir,
        stdout_pattern=job.spec.stdout_pattern,
        stderr_pattern=job.spec.stderr_pattern,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id if job.HasField("array_task_id") else None,
    )
    return {
        "allocations": [
            pb.NodeAllocation(
                node=p.node,
                cpus=p.cpus,
                mem_mb=p.mem_mb,
                gpu_indices=list(p.gpu_indices),
                shards=p.shards,
            )
            for p in places
        ],
        "partition": start.partition,
        "nodelist": hostlist.compress([p.node for p in places]),
        "batch_host": batch_host,
        "stdout_path": stdout,
        "stderr_path": stderr,
        "num_nodes": len(places),
        **_elastic_tasks(job, len(places)),
        **_restarted(job, now),
        "num_cpus": sum(p.cpus for p in places),
        "mem_mb": sum(p.mem_mb for p in places),
        # whole GPUs (a shared GPU's shards are not a GPU of the job's own)
        "num_gpus": sum(len(p.gpu_indices) - bool(p.shards) for p in places),
        "start_time": now,
        "reason": "None",  # Slurm's reason for a job that runs
        "expected_start": 0,
        "forecast_nodes": "",
        "forecast_reserved": False,
        "waits_for": [],
    }


def _elastic_tasks(job: pb.Job, nodes: int) -> js.Fields:
    """An elastic job without -n runs as many tasks as its size gives (one per node, or
    --ntasks-per-node each): its task count follows the size it got."""
    spec = job.spec
    if not spec.elastic or spec.ntasks:
        return {}
    return {"num_tasks": nodes * max(spec.ntasks_per_node, 1)}


def _restarted(job: pb.Job, now: float) -> js.Fields:
    """ETTR's marks of a start (corral/ettr.py): the first start, and the restart
    overhead of the interruption this run follows."""
    fields: js.Fields = {} if job.first_start_time else {"first_start_time": now}
    if job.interruptions and not job.interruptions[-1].next_start:
        last = pb.Interruption()
        last.CopyFrom(job.interruptions[-1])
        last.next_start = max(now, last.time)
        fields["interruptions"] = [*job.interruptions[:-1], last]
    return fields
