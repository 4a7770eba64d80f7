"""Slurm's variables of a job's allocation, built in one place from the job record.

salloc's shell, the batch script and every task of a step see the same values for
these (SLURM_JOB_*, the node list, the counts, the options the job asked for); what
differs between them (the node a process runs on, its rank, its GPUs, a step's own
counts) each caller adds on top. docs/environment.md lists them.
"""

from __future__ import annotations

from corral.jobspec import array_tasks, tasks_per_node
from corral.jobsyntax import array_environment
from corral.slurmfmt import compress_counts
from corral.wire import corral_pb2 as pb


def allocation_variables(job: pb.Job, cluster: str) -> dict[str, str]:
    """The job-wide SLURM_* variables of JOB on CLUSTER (its whole allocation)."""
    spec = job.spec
    tasks = tasks_per_node(job)
    ntasks = str(sum(tasks))
    nodes = str(len(job.allocations))
    env = {
        "SLURM_JOB_ID": str(job.job_id),
        "SLURM_JOBID": str(job.job_id),
        "SLURM_JOB_NAME": spec.name,
        "SLURM_JOB_USER": job.user,
        "SLURM_JOB_UID": str(job.uid),
        "SLURM_JOB_GID": str(job.gid),
        "SLURM_SUBMIT_DIR": spec.submit_dir or spec.work_dir,
        "SLURM_SUBMIT_HOST": spec.submit_host,
        "SLURM_JOB_NODELIST": job.nodelist,
        "SLURM_NODELIST": job.nodelist,
        "SLURM_JOB_NUM_NODES": nodes,
        "SLURM_NNODES": nodes,
        "SLURM_NTASKS": ntasks,
        "SLURM_NPROCS": ntasks,
        "SLURM_TASKS_PER_NODE": compress_counts(tasks),
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([a.cpus for a in job.allocations]),
        "SLURM_JOB_PARTITION": job.partition,
        "SLURM_CLUSTER_NAME": cluster or job.cluster,
        "SLURM_JOB_START_TIME": str(int(job.start_time)),
        "SLURM_RESTART_COUNT": str(job.restart_count),
        "SLURM_JOB_QOS": job.qos or spec.qos or "normal",  # ctld resolved DefaultQOS
    }
    if job.HasField("array_task_id"):
        array = array_tasks(spec)
        if array is not None:
            env.update(array_environment(array, job.array_job_id, job.array_task_id))
    if job.time_limit_s > 0:
        env["SLURM_JOB_END_TIME"] = str(int(job.start_time + job.time_limit_s))
    if job.account:
        env["SLURM_JOB_ACCOUNT"] = job.account
    asked = (
        ("SLURM_GPUS", spec.gpus),
        ("SLURM_GPUS_PER_NODE", spec.gpus_per_node),
        ("SLURM_CPUS_PER_TASK", spec.cpus_per_task),
        ("SLURM_NTASKS_PER_NODE", spec.ntasks_per_node),
        ("SLURM_MEM_PER_NODE", spec.mem_per_node_mb),
        ("SLURM_MEM_PER_CPU", spec.mem_per_cpu_mb),
    )
    env.update((name, str(value)) for name, value in asked if value)
    if job.previous_num_nodes:  # a requeued job's earlier run (an elastic one rescales)
        env["SLURM_JOB_PREVIOUS_NUM_NODES"] = str(job.previous_num_nodes)
        env["SLURM_JOB_PREVIOUS_NTASKS"] = str(job.previous_num_tasks)
    return env
