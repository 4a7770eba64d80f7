"""sacct's values: each field of a job's line, its ``N.batch`` line and its srun steps'
``N.S`` lines, read from the job's typed view (``client.views``)."""

from __future__ import annotations

from client.ettr_fields import ettr_values
from client.fmt import convert_mb, group_name, limit_minutes
from client.views.job import Job
from client.views.step import Step
from corral.slurmfmt import CPU, format_duration, format_elapsed, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from corral.wire import json_types as t

ON_NODE = frozenset({"RUNNING", "COMPLETING"})


def started(job: Job) -> bool:
    return bool(job.start_time) and job.state_name != "PENDING"


def elapsed(job: Job, now: float) -> int:
    if not started(job):
        return 0
    end = job.end_time
    if job.state_name in ON_NODE or not end:
        end = now
    return max(0, int(end - job.start_time))


def cancelled_by(job: Job) -> int:
    """The uid that cancelled the job (older records: its owner)."""
    who = job.cancelled_by
    return who if who is not None and who >= 0 else job.uid


def exit_code(job: Job) -> str:
    return f"{job.exit_code}:{job.exit_signal}"


def derived_exit_code(job: Job) -> str:
    """Slurm's DerivedExitCode: the highest exit code of the job's srun steps, with the
    signal of that step (the batch script's own code is ExitCode); 0:0 without steps."""
    best = max(((s.exit_code, s.exit_signal) for s in job.steps), default=(0, 0))
    return f"{best[0]}:{best[1]}"


def tres(cpus: int, mem_mb: int, gpus: int, nodes: int, *, billing: bool, mem: bool) -> str:
    """A TRES list in sacct's order (by name): billing, cpu, gres/gpu, mem, node."""
    parts = [f"billing={cpus}"] if billing else []
    parts.append(f"cpu={cpus}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    if mem_mb or mem:
        parts.append(f"mem={convert_mb(mem_mb)}")
    parts.append(f"node={nodes}")
    return ",".join(parts)


def job_tres(job: Job) -> str:
    return tres(job.num_cpus, job.mem_mb, job.num_gpus, job.num_nodes, billing=True, mem=False)


def timelimit(job: t.Job, raw: bool = False) -> str:
    limit = Job(job).time_limit_s
    if limit < 0:
        return "UNLIMITED"
    if not limit:
        return "Partition_Limit"
    return str(limit_minutes(limit) // 60) if raw else format_elapsed(limit_minutes(limit))


def _ettr(name: str) -> Callable[[Job, float], str]:
    return lambda j, now: ettr_values(j, now)[name]


def _usage(name: str) -> Callable[[Job, float], str]:
    return lambda j, now: usage_values(j).get(name, "")


def _ran_cpus(j: Job, now: float) -> int:
    return elapsed(j, now) * j.num_cpus


# the job (allocation) line, by sacct field name, each computed only when printed (a
# row of sacct -X's seven columns computes seven values, not fifty); fields not here
# print empty
JOB_VALUES: dict[str, Callable[[Job, float], str]] = {
    "Account": lambda j, now: j.account,
    "AllocCPUS": lambda j, now: str(j.num_cpus),
    "AllocTRES": lambda j, now: job_tres(j) if started(j) else "",
    "Cluster": lambda j, now: j.cluster,
    "Comment": lambda j, now: j.spec.comment,
    "Constraints": lambda j, now: j.spec.constraint,
    "CPUTime": lambda j, now: format_elapsed(_ran_cpus(j, now)),
    "CPUTimeRAW": lambda j, now: str(_ran_cpus(j, now)),
    "DerivedExitCode": lambda j, now: derived_exit_code(j),
    "Elapsed": lambda j, now: format_elapsed(elapsed(j, now)),
    "ElapsedRaw": lambda j, now: str(elapsed(j, now)),
    "Eligible": lambda j, now: format_timestamp(j.eligible_time),
    "End": lambda j, now: "Unknown" if j.state_name in ON_NODE else format_timestamp(j.end_time),
    # Slurm's job line: 0:0 for a job ended by scancel or its time limit (the signal
    # shows on its batch step, CANCELLED 0:15)
    "ExitCode": lambda j, now: "0:0" if j.state_name in ("CANCELLED", "TIMEOUT") else exit_code(j),
    "GID": lambda j, now: str(j.gid),
    "Group": lambda j, now: group_name(j.gid),
    "JobID": lambda j, now: j.ref,
    "JobIDRaw": lambda j, now: str(j.job_id),
    "JobName": lambda j, now: j.spec.name,
    "NCPUS": lambda j, now: str(j.num_cpus),
    "NNodes": lambda j, now: str(j.num_nodes),
    "NodeList": lambda j, now: j.nodelist if started(j) else "None assigned",
    "Partition": lambda j, now: j.partition,
    "Priority": lambda j, now: str(j.priority),
    "QOS": lambda j, now: j.qos or j.spec.qos or "normal",
    "Reason": lambda j, now: j.reason or "None",
    "Restarts": lambda j, now: str(j.restart_count),
    "ReqCPUS": lambda j, now: str(j.num_cpus),
    "ReqMem": lambda j, now: convert_mb(j.spec.mem_per_node_mb or j.spec.mem_per_cpu_mb),
    "ReqNodes": lambda j, now: str(j.num_nodes),
    "ReqTRES": lambda j, now: job_tres(j),
    "Start": lambda j, now: format_timestamp(j.start_time),
    "State": lambda j, now: (
        f"CANCELLED by {cancelled_by(j)}" if j.state_name == "CANCELLED" else j.state_name
    ),
    "Submit": lambda j, now: format_timestamp(j.submit_time),
    "SubmitLine": lambda j, now: j.spec.submit_line,
    "Suspended": lambda j, now: "00:00:00",
    "Timelimit": lambda j, now: timelimit(j.raw),
    "TimelimitRaw": lambda j, now: timelimit(j.raw, raw=True),
    "UID": lambda j, now: str(j.uid),
    "User": lambda j, now: j.user,
    "WCKey": lambda j, now: j.spec.wckey,
    "WorkDir": lambda j, now: j.spec.work_dir,
    **{k: _usage(k) for k in ("TotalCPU", "UserCPU", "SystemCPU")},  # the batch step's
    **{k: _ettr(k) for k in ("Interruptions", "InterruptCauses", "RestartOverhead")},
    **{k: _ettr(k) for k in ("LostTime", "ETTR")},
}


def job_row(job: Job, now: float, names: Sequence[str]) -> list[str]:
    """The job (allocation) line's values in the order of ``names`` ("" for a field
    that line leaves empty): a list, not a dict per row, for 100,000 rows."""
    table = JOB_VALUES
    return [value(job, now) if (value := table.get(name)) else "" for name in names]


def cpu_time(seconds: float) -> str:
    """Slurm's TotalCPU/UserCPU form: MM:SS.mmm under an hour, [D-]HH:MM:SS above."""
    return format_duration(seconds, CPU)


def usage_values(job: Job) -> dict[str, str]:
    """What noded measured (MaxRSS, TotalCPU, GPU figures), for the batch step's line."""
    if not job.raw.get("usage"):
        return {}
    usage = job.usage
    user, system = usage.user_cpu_s, usage.system_cpu_s
    max_rss, ave_rss = usage.max_rss_kb, usage.ave_rss_kb
    gpus = any(a.gpu_indices for a in job.allocations)
    in_max = [f"cpu={format_elapsed(int(user + system))}"]
    in_ave = list(in_max)
    if gpus:
        in_max += [
            f"gres/gpumem={round(usage.gpu_mem_max_mb)}M",
            f"gres/gpuutil={round(usage.gpu_util_max)}",
        ]
        in_ave += [
            f"gres/gpumem={round(usage.gpu_mem_mean_mb)}M",
            f"gres/gpuutil={round(usage.gpu_util_mean)}",
        ]
    in_max.append(f"mem={max_rss}K")
    in_ave.append(f"mem={ave_rss}K")
    return {
        "MaxRSS": f"{max_rss}K",
        "AveRSS": f"{ave_rss}K",
        "MaxRSSNode": job.batch_host,
        "MaxRSSTask": "0",
        "TotalCPU": cpu_time(user + system),
        "UserCPU": cpu_time(user),
        "SystemCPU": cpu_time(system),
        "TRESUsageInMax": ",".join(in_max),
        "TRESUsageInAve": ",".join(in_ave),
        "TRESUsageInTot": ",".join(in_ave),
    }


def batch_allocation(job: Job) -> tuple[int, int, int]:
    """CPUs, memory and GPUs on the batch host (where the batch step runs)."""
    host = job.batch_host
    for alloc in job.allocations:
        if alloc.node == host:
            return alloc.cpus, alloc.mem_mb, len(alloc.gpu_indices)
    return job.num_cpus, job.mem_mb, job.num_gpus


def step_values(job: Job, now: float) -> dict[str, str]:
    """The ``N.batch`` step line: the batch script on its host, as Slurm prints it."""
    cpus, mem_mb, gpus = batch_allocation(job)
    ran = elapsed(job, now)
    state = job.state_name
    start = job.start_time
    return {
        "Account": job.account,
        "AllocCPUS": str(cpus),
        "AllocTRES": tres(cpus, mem_mb, gpus, 1, billing=False, mem=True),
        "Cluster": job.cluster,
        "CPUTime": format_elapsed(ran * cpus),
        "CPUTimeRAW": str(ran * cpus),
        "Elapsed": format_elapsed(ran),
        "ElapsedRaw": str(ran),
        "Eligible": format_timestamp(start),
        "End": "Unknown" if state in ON_NODE else format_timestamp(job.end_time),
        "ExitCode": exit_code(job),
        "JobID": f"{job.ref}.batch",  # 11_1.batch: tools group steps by their job's id
        "JobIDRaw": f"{job.job_id}.batch",
        "JobName": "batch",
        "NCPUS": str(cpus),
        "NNodes": "1",
        "NodeList": job.batch_host,
        "NTasks": "1",
        "Start": format_timestamp(start),
        "State": "CANCELLED" if state == "TIMEOUT" else state,
        "Submit": format_timestamp(start),
        "Suspended": "00:00:00",
        **usage_values(job),
    }


def srun_step_values(job: Job, step: Step, now: float) -> dict[str, str]:
    """An ``N.S`` line: a step srun ran."""
    state = step.state_name
    start, end = step.start_time, step.end_time
    ran = int((end or now) - start) if start else 0
    nodes = step.nodes
    cpus = sum(n.cpus for n in nodes)
    gpus = sum(len(n.gpu_indices) for n in nodes)
    return {
        "Account": job.account,
        "AllocCPUS": str(cpus),
        "AllocTRES": tres(cpus, 0, gpus, len(nodes), billing=False, mem=False),
        "Cluster": job.cluster,
        "CPUTime": format_elapsed(ran * cpus),
        "CPUTimeRAW": str(ran * cpus),
        "Elapsed": format_elapsed(ran),
        "ElapsedRaw": str(ran),
        "End": "Unknown" if state == "RUNNING" else format_timestamp(end),
        "ExitCode": f"{step.exit_code}:{step.exit_signal}",
        "JobID": f"{job.ref}.{step.step_id}",
        "JobIDRaw": f"{job.job_id}.{step.step_id}",
        "JobName": step.name,
        "NCPUS": str(cpus),
        "NNodes": str(len(nodes)),
        "NodeList": step.nodelist,
        "NTasks": str(step.ntasks),
        "Partition": job.partition,
        "Reason": step.reason or "None",  # a node's refusal to start it
        "Start": format_timestamp(start),
        "State": state,
        "Submit": format_timestamp(start),
        "SubmitLine": step.spec.submit_line,
        "Suspended": "00:00:00",
        "User": job.user,
    }
