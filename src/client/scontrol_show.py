"""scontrol show's records: jobs, nodes and partitions in Slurm 22.05's ``Key=Value``
layout, line for line (tools split them on spaces and ``=``); pure functions of the
GetJobs/GetNodes/GetPartitions replies."""

from __future__ import annotations

from client import nodepower
from client.fmt import (
    convert_mb,
    gpu_tres,
    group_name,
    limit_minutes,
    node_gres,
    or_null,
    user_name,
)
from client.views.job import Job
from client.views.node import Node, Partition
from client.views.spec import Spec
from corral import nodewords
from corral.patterns import expand_pattern
from corral.slurmfmt import format_elapsed, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

ON_NODE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


def record(lines: Sequence[str], one_liner: bool) -> str:
    """Lines of ``Key=Value`` pairs as one record: indented lines and a blank line after,
    or all on one line with -o (Slurm joins with the same separators)."""
    sep = " " if one_liner else "\n   "
    return sep.join([*lines, ""]) + ("\n" if one_liner else "\n\n")


# ---------------------------------------------------------------- jobs


def hms(seconds: float) -> str:
    return format_elapsed(max(0, int(seconds)))


def limit_text(limit: int) -> str:
    if limit < 0:
        return "UNLIMITED"
    return hms(limit_minutes(limit)) if limit else "Partition_Limit"


def run_time(job: Job, now: float) -> float:
    start = job.start_time
    if job.state_name == "PENDING" or not start:
        return 0.0
    end = job.end_time
    return (now if job.state_name in ON_NODE or not end else end) - start


def end_time(job: Job) -> str:
    if job.state_name in ON_NODE:
        limit = job.time_limit_s
        if limit < 0:
            return "Unknown"
        return format_timestamp(job.start_time + limit)
    return format_timestamp(job.end_time)


def expand_path(pattern: str, job: t.Job) -> str:
    """An output file pattern as the job's path, expanded as noded expands it."""
    return _expand(pattern, Job(job))


def _expand(pattern: str, job: Job) -> str:
    path = expand_pattern(
        pattern,
        job_id=job.job_id,
        job_name=job.spec.name,
        user=job.user,
        node=job.batch_host or "(null)",
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id if job.is_array_task else None,
    )
    workdir = job.spec.work_dir
    if not path.startswith("/") and workdir:
        path = f"{workdir.rstrip('/')}/{path}"
    return path


def std_paths(job: Job) -> tuple[str, str, str]:
    """StdErr, StdIn, StdOut as Slurm shows them (stderr goes with stdout by default)."""
    spec = job.spec
    default = "slurm-%A_%a.out" if job.is_array_task else "slurm-%j.out"  # Slurm's
    out = job.stdout_path or _expand(spec.stdout_pattern or default, job)
    err = job.stderr_path or (_expand(spec.stderr_pattern, job) if spec.stderr_pattern else out)
    return err, _expand(spec.stdin_path or "/dev/null", job), out


def job_tres(job: Job) -> str:
    """TRES in scontrol's order (by TRES id): cpu, mem, node, billing, gres/gpu."""
    cpus = job.num_cpus
    parts = [f"cpu={cpus}"]
    if job.mem_mb:
        parts.append(f"mem={convert_mb(job.mem_mb)}")
    parts.append(f"node={job.num_nodes}")
    parts.append(f"billing={cpus}")
    if job.num_gpus:
        parts.append(f"gres/gpu={job.num_gpus}")
    return ",".join(parts)


def eligible(job: Job) -> str:
    """A held pending job has no eligible (nor accrue) time yet, as in Slurm."""
    if job.state_name == "PENDING" and (job.hold or "HOLD_NONE") != "HOLD_NONE":
        return "Unknown"
    return format_timestamp(job.eligible_time)


def nodes_range(job: Job, spec: Spec) -> str:
    low = job.num_nodes
    high = spec.nodes_max
    if job.state_name == "PENDING" and high and high != low:
        return f"{min(low, high)}-{high}"
    return str(low)


def memory_line(spec: Spec) -> str:
    per_cpu = spec.mem_per_cpu_mb
    cpus = max(1, spec.cpus_per_task) * max(1, spec.ntasks_per_node)
    if per_cpu:
        mem = f"MinMemoryCPU={convert_mb(per_cpu)}"
    else:
        mem = f"MinMemoryNode={convert_mb(spec.mem_per_node_mb)}"
    return f"MinCPUsNode={cpus} {mem} MinTmpDiskNode=0"


def job_lines(job: Job, now: float) -> list[str]:
    """``scontrol show job``'s lines for one job (Slurm 22.05's order and spelling)."""
    spec = job.spec
    return [
        *_identity_lines(job, spec),
        *_time_lines(job, now),
        *_placement_lines(job, spec),
        *_file_lines(job, spec),
    ]


def _array_ids(job: Job) -> str:
    if not job.is_array_task:
        return ""
    return f"ArrayJobId={job.array_job_id} ArrayTaskId={job.array_task_id} "


def _identity_lines(job: Job, spec: Spec) -> list[str]:
    uid, gid = job.uid, job.gid
    return [
        f"JobId={job.job_id} {_array_ids(job)}JobName={spec.name}",
        f"UserId={job.user or user_name(uid)}({uid}) "
        f"GroupId={group_name(gid)}({gid}) MCS_label=N/A",
        f"Priority={job.priority} Nice={spec.nice} "
        f"Account={or_null(job.account)} "
        f"QOS={or_null(job.qos or spec.qos)}",
        # Slurm turns blanks of a reason into '_' so that the line splits on spaces
        f"JobState={job.state_name} Reason={(job.reason or 'None').replace(' ', '_')} "
        f"Dependency={or_null(spec.dependency)}",
        f"Requeue={int(spec.requeue)} Restarts={job.restart_count} "
        f"BatchFlag=1 Reboot=0 ExitCode={job.exit_code}:{job.exit_signal}",
        *_idle_line(job),
    ]


def _idle_line(job: Job) -> list[str]:
    since = job.idle_gpus_since
    return [f"IdleGPUsSince={format_timestamp(since)}"] if since else []


def _time_lines(job: Job, now: float) -> list[str]:
    submit, started = job.submit_time, job.start_time
    start = started
    if job.state_name == "PENDING":
        start = job.expected_start  # the backfill forecast, as Slurm shows it
    return [
        f"RunTime={hms(run_time(job, now))} TimeLimit={limit_text(job.time_limit_s)} TimeMin=N/A",
        f"SubmitTime={format_timestamp(submit)} EligibleTime={eligible(job)}",
        f"AccrueTime={eligible(job)}",
        f"StartTime={format_timestamp(start)} EndTime={end_time(job)} Deadline=N/A",
        "SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval={format_timestamp(started or submit)} Scheduler=Main",
    ]


def _placement_lines(job: Job, spec: Spec) -> list[str]:
    lines = [
        f"Partition={job.partition} AllocNode:Sid={spec.submit_host or 'localhost'}:0",
        f"ReqNodeList={or_null(spec.nodelist)} ExcNodeList={or_null(spec.exclude)}",
        f"NodeList={job.nodelist}",
    ]
    if job.forecast_nodes and job.state_name == "PENDING":
        lines.append(f"SchedNodeList={job.forecast_nodes}")
    if job.batch_host:
        lines.append(f"BatchHost={job.batch_host}")
    return [
        *lines,
        f"NumNodes={nodes_range(job, spec)} NumCPUs={job.num_cpus} "
        f"NumTasks={job.num_tasks or 1} CPUs/Task={max(1, spec.cpus_per_task)} "
        "ReqB:S:C:T=0:0:*:*",
        f"TRES={job_tres(job)}",
        f"Socks/Node=* NtasksPerN:B:S:C={spec.ntasks_per_node}:0:*:* CoreSpec=*",
        memory_line(spec),
        f"Features={or_null(spec.constraint)} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.exclusive else 'OK'} Contiguous=0 "
        "Licenses=(null) Network=(null)",
    ]


def _file_lines(job: Job, spec: Spec) -> list[str]:
    err, stdin, out = std_paths(job)
    command = spec.command or "(null)"  # --wrap and stdin scripts have no path
    lines = [f"Command={command}", f"WorkDir={spec.work_dir}"]
    if spec.reservation:
        lines.insert(0, f"Reservation={spec.reservation}")
    if spec.comment:
        lines.append(f"Comment={spec.comment} ")
    lines += [f"StdErr={err}", f"StdIn={stdin}", f"StdOut={out}", "Power="]
    lines += optional_tres_lines(spec)
    if spec.mail_type and spec.mail_user:
        lines.append(f"MailUser={spec.mail_user} MailType={spec.mail_type}")
    return lines


def optional_tres_lines(spec: Spec) -> list[str]:
    lines = []
    if spec.gpus:
        lines.append(f"TresPerJob={gpu_tres(spec.gpus, spec.gpu_type)}")
    if spec.gpus_per_node:
        lines.append(f"TresPerNode={gpu_tres(spec.gpus_per_node, spec.gpu_type)}")
    if spec.shards_per_node:
        lines.append(f"TresPerNode=gres:shard:{spec.shards_per_node}")
    return lines


def format_jobs(reply: t.GetJobsResponse, one_liner: bool = False) -> str:
    jobs = reply.get("jobs", [])
    if not jobs:
        return "No jobs in the system\n"
    now = float(reply.get("now") or 0)
    return "".join(record(job_lines(Job(j), now), one_liner) for j in jobs)


# ---------------------------------------------------------------- nodes


def complete_state(raw: t.Node) -> str:
    """The node state with its flags, as scontrol spells it (IDLE+DRAIN, ...)."""
    node = Node(raw)
    state = node.state_name
    busy = "ALLOCATED" if node.alloc_cpus >= node.resources.cpus else "MIXED"
    words = {"DRAIN": "IDLE+DRAIN", "DRAINING": f"{busy}+DRAIN", "FAIL": "IDLE+FAIL"}
    # its reservation after +DRAIN, as Slurm's IDLE+DRAIN+MAINTENANCE+RESERVED
    out = words.get(state, state) + nodewords.state_flags(node.reservation, node.maint)
    if node.not_responding or state in ("UNKNOWN", "DOWN"):
        out += "+NOT_RESPONDING"
    return out + nodepower.flags(node)


def node_tres(cpus: int, mem_mb: int, gpus: int, billing: bool, shards: int = 0) -> str:
    parts = [f"cpu={cpus}"] if cpus else []
    if mem_mb:
        parts.append(f"mem={convert_mb(mem_mb)}")
    if billing:
        parts.append(f"billing={cpus}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    if shards:
        parts.append(f"gres/shard={shards}")
    return ",".join(parts)


def node_lines(node: Node) -> list[str]:
    """``scontrol show node``'s lines for one node (Slurm 22.05's order and spelling)."""
    r = node.resources
    cpus = r.cpus
    name = node.name
    host = node.address.rpartition(":")[0] or name
    features = ",".join(r.features) or "(null)"
    lines = [
        f"NodeName={name} Arch=x86_64 CoresPerSocket={r.cores_per_socket} ",
        f"CPUAlloc={node.alloc_cpus} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={node_gres(node)}",
        f"NodeAddr={host} NodeHostName={name} Version={node.version or 'N/A'}",
    ]
    if node.os:
        lines.append(f"OS={node.os} ")
    boot = node.boot_time
    lines += [
        f"RealMemory={r.memory_mb} AllocMem={node.alloc_mem_mb} FreeMem=N/A "
        f"Sockets={r.sockets} Boards=1",
        f"State={complete_state(node.raw)} ThreadsPerCore={r.threads_per_core} "
        "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
    ]
    if node.partitions:
        lines.append(f"Partitions={','.join(node.partitions)} ")
    lines += [
        f"BootTime={format_timestamp(boot, unknown='None')} "
        f"SlurmdStartTime={format_timestamp(boot, unknown='None')}",
        f"LastBusyTime={format_timestamp(node.last_heartbeat)}",
        f"CfgTRES={node_tres(cpus, r.memory_mb, len(r.gpus), True)}",
        "AllocTRES="
        + node_tres(node.alloc_cpus, node.alloc_mem_mb, node.alloc_gpus, False, node.alloc_shards),
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.reason:
        when = node.reason_time
        who = node.reason_user or "root"
        stamp = f" [{who}@{format_timestamp(when)}]" if when else ""
        lines.append(f"Reason={node.reason}{stamp}")
    return lines


def node_record(node: Node, one_liner: bool) -> str:
    """A node record: Slurm ends it without a trailing separator (unlike jobs)."""
    sep = " " if one_liner else "\n   "
    return sep.join(node_lines(node)) + ("\n" if one_liner else "\n\n")


def format_nodes(reply: t.GetNodesResponse, one_liner: bool = False) -> str:
    return "".join(node_record(Node(n), one_liner) for n in reply.get("nodes", []))


# ---------------------------------------------------------------- partitions


def part_time(seconds: int, none: str) -> str:
    if seconds < 0:
        return none
    return hms(seconds)


def partition_lines(part: Partition) -> list[str]:
    """``scontrol show partition``'s lines for one partition."""
    accounts = ",".join(part.allow_accounts) or "ALL"
    max_nodes = part.max_nodes
    cpus = part.total_cpus
    tres = f"cpu={cpus},node={part.total_nodes},billing={cpus}"
    if part.total_gpus:
        tres += f",gres/gpu={part.total_gpus}"
    return [
        f"PartitionName={part.name}",
        f"AllowGroups=ALL AllowAccounts={accounts} AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if part.is_default else 'NO'} QoS=N/A",
        f"DefaultTime={part_time(part.default_time_s, 'NONE')} DisableRootJobs=NO "
        "ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"MaxNodes={max_nodes or 'UNLIMITED'} "
        f"MaxTime={part_time(part.max_time_s, 'UNLIMITED')} MinNodes=0 LLN=NO "
        "MaxCPUsPerNode=UNLIMITED",
        f"Nodes={part.nodes}",
        f"PriorityJobFactor=1 PriorityTier={part.priority_tier} RootOnly=NO "
        "ReqResv=NO OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={part.state or 'UP'} TotalCPUs={cpus} "
        f"TotalNodes={part.total_nodes} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres}",
    ]


def format_partitions(partitions: Sequence[t.Partition], one_liner: bool = False) -> str:
    sep = " " if one_liner else "\n   "
    end = "\n" if one_liner else "\n\n"
    return "".join(sep.join(partition_lines(Partition(p))) + end for p in partitions)
