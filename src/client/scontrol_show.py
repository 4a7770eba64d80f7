"""scontrol show's records: jobs, nodes and partitions in Slurm 22.05's ``Key=Value``
layout, line for line (tools split them on spaces and ``=``); pure functions of the
GetJobs/GetNodes/GetPartitions replies."""

from __future__ import annotations

from client.common import job_state, node_state, num, real, text
from client.fmt import (
    convert_mb,
    gpu_tres,
    group_name,
    limit_minutes,
    node_gres,
    or_null,
    res,
    user_name,
)
from corral.patterns import expand_pattern
from corral.slurmfmt import format_elapsed, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from client.common import Json

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


def run_time(job: Json, now: float) -> float:
    start = real(job, "startTime")
    if job_state(job) == "PENDING" or not start:
        return 0.0
    end = real(job, "endTime")
    return (now if job_state(job) in ON_NODE or not end else end) - start


def end_time(job: Json) -> str:
    if job_state(job) in ON_NODE:
        limit = num(job, "timeLimitS")
        if limit < 0:
            return "Unknown"
        return format_timestamp(real(job, "startTime") + limit)
    return format_timestamp(real(job, "endTime"))


def expand_path(pattern: str, job: Json) -> str:
    """An output file pattern as the job's path, expanded as noded expands it."""
    spec = job.get("spec") or {}
    path = expand_pattern(
        pattern,
        job_id=num(job, "jobId"),
        job_name=text(spec, "name"),
        user=text(job, "user"),
        node=text(job, "batchHost") or "(null)",
        array_job_id=num(job, "arrayJobId"),
        array_task_id=num(job, "arrayTaskId") if "arrayTaskId" in job else None,
    )
    workdir = text(spec, "workDir")
    if not path.startswith("/") and workdir:
        path = f"{workdir.rstrip('/')}/{path}"
    return path


def std_paths(job: Json) -> tuple[str, str, str]:
    """StdErr, StdIn, StdOut as Slurm shows them (stderr goes with stdout by default)."""
    spec = job.get("spec") or {}
    default = "slurm-%A_%a.out" if "arrayTaskId" in job else "slurm-%j.out"  # Slurm's
    out = text(job, "stdoutPath") or expand_path(text(spec, "stdoutPattern") or default, job)
    err = text(job, "stderrPath") or (
        expand_path(text(spec, "stderrPattern"), job) if spec.get("stderrPattern") else out
    )
    return err, expand_path(text(spec, "stdinPath") or "/dev/null", job), out


def job_tres(job: Json) -> str:
    """TRES in scontrol's order (by TRES id): cpu, mem, node, billing, gres/gpu."""
    cpus = num(job, "numCpus")
    parts = [f"cpu={cpus}"]
    if num(job, "memMb"):
        parts.append(f"mem={convert_mb(num(job, 'memMb'))}")
    parts.append(f"node={num(job, 'numNodes')}")
    parts.append(f"billing={cpus}")
    if num(job, "numGpus"):
        parts.append(f"gres/gpu={num(job, 'numGpus')}")
    return ",".join(parts)


def eligible(job: Json, key: str) -> str:
    """A held pending job has no eligible (nor accrue) time yet, as in Slurm."""
    if job_state(job) == "PENDING" and text(job, "hold", "HOLD_NONE") != "HOLD_NONE":
        return "Unknown"
    return format_timestamp(real(job, key))


def nodes_range(job: Json, spec: Json) -> str:
    low = num(job, "numNodes")
    high = num(spec, "nodesMax")
    if job_state(job) == "PENDING" and high and high != low:
        return f"{min(low, high)}-{high}"
    return str(low)


def memory_line(spec: Json) -> str:
    per_cpu = num(spec, "memPerCpuMb")
    cpus = max(1, num(spec, "cpusPerTask")) * max(1, num(spec, "ntasksPerNode"))
    if per_cpu:
        mem = f"MinMemoryCPU={convert_mb(per_cpu)}"
    else:
        mem = f"MinMemoryNode={convert_mb(num(spec, 'memPerNodeMb'))}"
    return f"MinCPUsNode={cpus} {mem} MinTmpDiskNode=0"


def job_lines(job: Json, now: float) -> list[str]:
    """``scontrol show job``'s lines for one job (Slurm 22.05's order and spelling)."""
    spec: Json = job.get("spec") or {}
    return [
        *_identity_lines(job, spec),
        *_time_lines(job, now),
        *_placement_lines(job, spec),
        *_file_lines(job, spec),
    ]


def _array_ids(job: Json) -> str:
    if "arrayTaskId" not in job:
        return ""
    return f"ArrayJobId={num(job, 'arrayJobId')} ArrayTaskId={num(job, 'arrayTaskId')} "


def _identity_lines(job: Json, spec: Json) -> list[str]:
    uid, gid = num(job, "uid"), num(job, "gid")
    return [
        f"JobId={num(job, 'jobId')} {_array_ids(job)}JobName={text(spec, 'name')}",
        f"UserId={text(job, 'user') or user_name(uid)}({uid}) "
        f"GroupId={group_name(gid)}({gid}) MCS_label=N/A",
        f"Priority={num(job, 'priority')} Nice={num(spec, 'nice')} "
        f"Account={or_null(text(job, 'account'))} "
        f"QOS={or_null(text(job, 'qos') or text(spec, 'qos'))}",
        # Slurm turns blanks of a reason into '_' so that the line splits on spaces
        f"JobState={job_state(job)} Reason={(text(job, 'reason') or 'None').replace(' ', '_')} "
        f"Dependency={or_null(text(spec, 'dependency'))}",
        f"Requeue={int(bool(spec.get('requeue')))} Restarts={num(job, 'restartCount')} "
        f"BatchFlag=1 Reboot=0 ExitCode={num(job, 'exitCode')}:{num(job, 'exitSignal')}",
        *_idle_line(job),
    ]


def _idle_line(job: Json) -> list[str]:
    since = real(job, "idleGpusSince")
    return [f"IdleGPUsSince={format_timestamp(since)}"] if since else []


def _time_lines(job: Json, now: float) -> list[str]:
    submit, started = real(job, "submitTime"), real(job, "startTime")
    start = started
    if job_state(job) == "PENDING":
        start = real(job, "expectedStart")  # the backfill forecast, as Slurm shows it
    return [
        f"RunTime={hms(run_time(job, now))} TimeLimit={limit_text(num(job, 'timeLimitS'))} "
        "TimeMin=N/A",
        f"SubmitTime={format_timestamp(submit)} EligibleTime={eligible(job, 'eligibleTime')}",
        f"AccrueTime={eligible(job, 'eligibleTime')}",
        f"StartTime={format_timestamp(start)} EndTime={end_time(job)} Deadline=N/A",
        "SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval={format_timestamp(started or submit)} Scheduler=Main",
    ]


def _placement_lines(job: Json, spec: Json) -> list[str]:
    lines = [
        f"Partition={text(job, 'partition')} "
        f"AllocNode:Sid={text(spec, 'submitHost') or 'localhost'}:0",
        f"ReqNodeList={or_null(text(spec, 'nodelist'))} "
        f"ExcNodeList={or_null(text(spec, 'exclude'))}",
        f"NodeList={text(job, 'nodelist')}",
    ]
    if text(job, "forecastNodes") and job_state(job) == "PENDING":
        lines.append(f"SchedNodeList={text(job, 'forecastNodes')}")
    if text(job, "batchHost"):
        lines.append(f"BatchHost={text(job, 'batchHost')}")
    return [
        *lines,
        f"NumNodes={nodes_range(job, spec)} NumCPUs={num(job, 'numCpus')} "
        f"NumTasks={num(job, 'numTasks') or 1} CPUs/Task={max(1, num(spec, 'cpusPerTask'))} "
        "ReqB:S:C:T=0:0:*:*",
        f"TRES={job_tres(job)}",
        f"Socks/Node=* NtasksPerN:B:S:C={num(spec, 'ntasksPerNode')}:0:*:* CoreSpec=*",
        memory_line(spec),
        f"Features={or_null(text(spec, 'constraint'))} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.get('exclusive') else 'OK'} Contiguous=0 "
        "Licenses=(null) Network=(null)",
    ]


def _file_lines(job: Json, spec: Json) -> list[str]:
    err, stdin, out = std_paths(job)
    command = text(spec, "command") or "(null)"  # --wrap and stdin scripts have no path
    lines = [f"Command={command}", f"WorkDir={text(spec, 'workDir')}"]
    if text(spec, "reservation"):
        lines.insert(0, f"Reservation={text(spec, 'reservation')}")
    if text(spec, "comment"):
        lines.append(f"Comment={text(spec, 'comment')} ")
    lines += [f"StdErr={err}", f"StdIn={stdin}", f"StdOut={out}", "Power="]
    lines += optional_tres_lines(spec)
    if text(spec, "mailType") and text(spec, "mailUser"):
        lines.append(f"MailUser={text(spec, 'mailUser')} MailType={text(spec, 'mailType')}")
    return lines


def optional_tres_lines(spec: Json) -> list[str]:
    lines = []
    if num(spec, "gpus"):
        lines.append(f"TresPerJob={gpu_tres(num(spec, 'gpus'), text(spec, 'gpuType'))}")
    if num(spec, "gpusPerNode"):
        lines.append(f"TresPerNode={gpu_tres(num(spec, 'gpusPerNode'), text(spec, 'gpuType'))}")
    if num(spec, "shardsPerNode"):
        lines.append(f"TresPerNode=gres:shard:{num(spec, 'shardsPerNode')}")
    return lines


def format_jobs(reply: Json, one_liner: bool = False) -> str:
    jobs = reply.get("jobs", [])
    if not jobs:
        return "No jobs in the system\n"
    now = real(reply, "now")
    return "".join(record(job_lines(j, now), one_liner) for j in jobs)


# ---------------------------------------------------------------- nodes


def complete_state(node: Json) -> str:
    """The node state with its flags, as scontrol spells it (IDLE+DRAIN, ...)."""
    state = node_state(node)
    busy = "ALLOCATED" if num(node, "allocCpus") >= num(res(node), "cpus") else "MIXED"
    if text(node, "reservation"):
        state += "+MAINT+RESERVED" if node.get("maint") else "+RESERVED"
    if node.get("notResponding") and state not in ("UNKNOWN", "DOWN"):
        state += "+NOT_RESPONDING"
    return {
        "UNKNOWN": "UNKNOWN+NOT_RESPONDING",
        "DOWN": "DOWN+NOT_RESPONDING",
        "DRAIN": "IDLE+DRAIN",
        "DRAINING": f"{busy}+DRAIN",
        "FAIL": "IDLE+FAIL",
    }.get(state, state)


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


def node_lines(node: Json) -> list[str]:
    """``scontrol show node``'s lines for one node (Slurm 22.05's order and spelling)."""
    r = res(node)
    cpus = num(r, "cpus")
    name = text(node, "name")
    host = text(node, "address").rpartition(":")[0] or name
    lines = [
        f"NodeName={name} Arch=x86_64 CoresPerSocket={num(r, 'coresPerSocket', cpus)} ",
        f"CPUAlloc={num(node, 'allocCpus')} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        "AvailableFeatures=(null)",
        "ActiveFeatures=(null)",
        f"Gres={node_gres(node)}",
        f"NodeAddr={host} NodeHostName={name} Version={text(node, 'version') or 'N/A'}",
    ]
    if text(node, "os"):
        lines.append(f"OS={text(node, 'os')} ")
    boot = real(node, "bootTime")
    lines += [
        f"RealMemory={num(r, 'memoryMb')} AllocMem={num(node, 'allocMemMb')} FreeMem=N/A "
        f"Sockets={num(r, 'sockets', 1)} Boards=1",
        f"State={complete_state(node)} ThreadsPerCore={num(r, 'threadsPerCore', 1)} "
        "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
    ]
    if node.get("partitions"):
        lines.append(f"Partitions={','.join(node['partitions'])} ")
    lines += [
        f"BootTime={format_timestamp(boot, unknown='None')} "
        f"SlurmdStartTime={format_timestamp(boot, unknown='None')}",
        f"LastBusyTime={format_timestamp(real(node, 'lastHeartbeat'))}",
        f"CfgTRES={node_tres(cpus, num(r, 'memoryMb'), len(r.get('gpus', [])), True)}",
        "AllocTRES="
        + node_tres(
            num(node, "allocCpus"),
            num(node, "allocMemMb"),
            num(node, "allocGpus"),
            False,
            num(node, "allocShards"),
        ),
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if text(node, "reason"):
        when = real(node, "reasonTime")
        who = text(node, "reasonUser") or "root"
        stamp = f" [{who}@{format_timestamp(when)}]" if when else ""
        lines.append(f"Reason={text(node, 'reason')}{stamp}")
    return lines


def node_record(node: Json, one_liner: bool) -> str:
    """A node record: Slurm ends it without a trailing separator (unlike jobs)."""
    sep = " " if one_liner else "\n   "
    return sep.join(node_lines(node)) + ("\n" if one_liner else "\n\n")


def format_nodes(reply: Json, one_liner: bool = False) -> str:
    return "".join(node_record(n, one_liner) for n in reply.get("nodes", []))


# ---------------------------------------------------------------- partitions


def part_time(seconds: int, none: str) -> str:
    if seconds < 0:
        return none
    return hms(seconds)


def partition_lines(part: Json) -> list[str]:
    """``scontrol show partition``'s lines for one partition."""
    accounts = ",".join(part.get("allowAccounts", [])) or "ALL"
    max_nodes = num(part, "maxNodes")
    cpus = num(part, "totalCpus")
    tres = f"cpu={cpus},node={num(part, 'totalNodes')},billing={cpus}"
    if num(part, "totalGpus"):
        tres += f",gres/gpu={num(part, 'totalGpus')}"
    return [
        f"PartitionName={text(part, 'name')}",
        f"AllowGroups=ALL AllowAccounts={accounts} AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if part.get('isDefault') else 'NO'} QoS=N/A",
        f"DefaultTime={part_time(num(part, 'defaultTimeS', -1), 'NONE')} DisableRootJobs=NO "
        "ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"MaxNodes={max_nodes or 'UNLIMITED'} "
        f"MaxTime={part_time(num(part, 'maxTimeS', -1), 'UNLIMITED')} MinNodes=0 LLN=NO "
        "MaxCPUsPerNode=UNLIMITED",
        f"Nodes={text(part, 'nodes')}",
        f"PriorityJobFactor=1 PriorityTier={num(part, 'priorityTier', 1)} RootOnly=NO "
        "ReqResv=NO OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={text(part, 'state') or 'UP'} TotalCPUs={cpus} "
        f"TotalNodes={num(part, 'totalNodes')} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres}",
    ]


def format_partitions(partitions: Sequence[Json], one_liner: bool = False) -> str:
    sep = " " if one_liner else "\n   "
    end = "\n" if one_liner else "\n\n"
    return "".join(sep.join(partition_lines(p)) + end for p in partitions)
