"""scontrol: show jobs, nodes and partitions in Slurm's key=value layout; hold/release.

``show job`` prints what Slurm 22.05 prints, line for line (tools split it on spaces
and ``=``), a blank line after each record; ``-o`` puts a record on one line. The
records are pure functions of the GetJobs/GetNodes/GetPartitions replies.
"""

from __future__ import annotations

import sys

from client import nodepower
from client.common import client, job_state, node_state, num, real, run, text
from client.fmt import (
    Reported,
    call,
    convert_mb,
    gpu_tres,
    group_name,
    job_filter,
    limit_minutes,
    node_gres,
    or_null,
    parse_job_ids,
    res,
    split_list,
    user_name,
)
from client.options import COUNT, FLAG, Option, OptionParser, answered, version_line
from corral.errors import CorralError, InvalidNodeName, InvalidOption
from corral.patterns import expand_pattern
from corral.slurmfmt import format_elapsed, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    from client.common import Json
    from corral.wire import json_types as t

    Reply = TypeVar("Reply")

PROG = "scontrol"
ON_NODE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})
HOLD_ACTIONS: dict[str, t.JobUpdateAction] = {
    "hold": "JOB_UPDATE_HOLD",
    "uhold": "JOB_UPDATE_USER_HOLD",
    "release": "JOB_UPDATE_RELEASE",
    "requeue": "JOB_UPDATE_REQUEUE",
    "requeuehold": "JOB_UPDATE_REQUEUE_HOLD",
}


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
    }.get(state, state) + nodepower.flags(node)


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


# ---------------------------------------------------------------- commands


def show(words: Sequence[str], one_liner: bool) -> int:
    if not words:
        raise Reported("too few arguments for keyword:show")
    entity, args = words[0].lower(), list(words[1:])
    if len(args) > 1:
        raise Reported("too many arguments for keyword:show")
    name = args[0] if args else ""
    if entity in ("hostnames", "hostlist", "hostlistsorted"):
        return show_hosts(entity, name)
    if _is(entity, "jobs", 1):
        return show_jobs(name, one_liner)
    if _is(entity, "nodes", 1):
        return show_nodes(name, one_liner)
    if _is(entity, "partitions", 1):
        return show_partitions(name, one_liner)
    if _is(entity, "reservations", 1):
        from client import scontrol_resv

        sys.stdout.write(scontrol_resv.show(name, one_liner))
        return 0
    raise Reported(f"invalid entity:{words[0]} for keyword:show ")


def show_hosts(entity: str, expr: str) -> int:
    """``hostnames``: one name a line; ``hostlist``/``hostlistsorted``: the expression.
    With no list, SLURM_JOB_NODELIST (as Slurm's man page says), else SLURM_NODELIST (what
    a real 22.05 reads); a list starting with / is a file."""
    import os

    from corral import hostlist

    expr = expr or os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "")
    if expr.startswith("/"):
        try:
            with open(expr) as fh:
                expr = ",".join(fh.read().split())
        except OSError as exc:
            raise Reported(f"Unable to read file {expr}: {exc.strerror}") from None
    try:
        names = hostlist.expand(expr) if expr else []
    except CorralError as exc:
        raise Reported(f"Invalid hostlist: {expr} ({exc})") from None
    if not names:  # a real 22.05 says so and exits 0 (checked): scripts go on
        sys.stderr.write("scontrol: error: host list is empty\n")
        return 0
    if entity == "hostnames":
        sys.stdout.write("".join(n + "\n" for n in names))
    else:
        if entity == "hostlistsorted":
            names.sort(key=hostlist.sort_key)
        sys.stdout.write(hostlist.ranged(names) + "\n")
    return 0


def _is(word: str, keyword: str, least: int) -> bool:
    """Slurm accepts any unambiguous prefix of a keyword (``sh j``, ``show part``)."""
    return len(word) >= least and keyword.startswith(word)


def load(rpc: Callable[[], Reply], what: str) -> Reply:
    return call(rpc, f"{what} error", keep=(InvalidNodeName,))


def show_jobs(job_id: str, one_liner: bool) -> int:
    request: t.GetJobsRequest = {}
    if job_id:
        try:
            request["filter"] = job_filter(job_id)
        except InvalidOption:
            raise Reported("scontrol_print_job error: Invalid job id specified") from None
    reply = load(lambda: client().get_jobs(request), "slurm_load_jobs")
    sys.stdout.write(format_jobs(reply, one_liner))
    return 0


def show_nodes(name: str, one_liner: bool) -> int:
    try:
        nodes: t.GetNodesRequest = {"names": [name]} if name else {}
        reply = load(lambda: client().get_nodes(nodes), "slurm_load_node")
    except InvalidNodeName:
        raise Reported(f"Node {name} not found") from None
    sys.stdout.write(format_nodes(reply, one_liner))
    return 0


def show_partitions(name: str, one_liner: bool) -> int:
    try:
        request: t.GetPartitionsRequest = {"names": [name]} if name else {}
        reply = load(lambda: client().get_partitions(request), "slurm_load_partitions")
    except Reported:
        if name:
            raise Reported(f"Partition {name} not found") from None  # Slurm's words
        raise
    partitions = reply.get("partitions", [])
    if name and not partitions:
        raise Reported(f"Partition {name} not found")
    sys.stdout.write(format_partitions(partitions, one_liner))
    return 0


def hold_messages(outcomes: Sequence[Json]) -> list[str]:
    """What scontrol prints for failed holds/releases: a line per job, then Slurm's
    ``slurm_suspend error`` line with the last error."""
    failed = [o for o in outcomes if not o.get("ok")]
    lines = [f"{text(o, 'message')} for job {text(o, 'jobId')}" for o in failed]
    if failed:
        lines.append(f"slurm_suspend error: {text(failed[-1], 'message')}")
    return lines


def update_holds(action: str, words: Sequence[str]) -> int:
    if not words:
        raise Reported(f"too few arguments for keyword:{action}")
    if action.startswith("requeue"):
        # a job that requeues itself (submitit does, from its step) gets SIGTERM for it
        # at once: the command must still finish and exit 0, not die of its own request
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rc = 0
    for word in words:  # each argument is its own request, as in Slurm
        outcomes = _hold(action, word)
        lines = hold_messages(outcomes)
        if lines:
            sys.stderr.write("".join(line + "\n" for line in lines))
            rc = 1
    return rc


def _hold(action: str, word: str) -> list[Json]:
    ids: list[str] = []
    bad: list[Json] = []
    for item in word.split(","):
        try:
            ids.extend(parse_job_ids(item))
        except InvalidOption:
            bad.append({"jobId": item, "message": "Invalid job id specified"})
    outcomes: list[Json] = []
    if ids:
        reply = client().update_job({"jobIds": ids, "action": HOLD_ACTIONS[action]})
        outcomes = list(reply.get("outcomes", []))
    return outcomes + bad


OPTIONS = (
    Option("a", "all", "all", FLAG, help="(no effect: hidden partitions are shown)"),
    Option("d", "details", "details", FLAG, help="(accepted for compatibility)"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("o", "oneliner", "oneliner", FLAG, help="one line per record"),
    Option("Q", "quiet", "quiet", FLAG, help="no error messages"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


UPDATE_KEYS = {"timelimit", "partition", "priority", "nice", "numnodes", "name", "jobname"}


def update_request(words: Sequence[str]) -> t.UpdateJobRequest:
    """``update job N Key=Value...`` or ``update JobId=N Key=Value...`` as a request."""
    from corral.slurmfmt import UNLIMITED, parse_duration

    ids: list[str] = []
    request: t.UpdateJobRequest = {"action": "JOB_UPDATE_FIELDS"}
    rest = list(words)
    if rest and rest[0].lower() == "job" and len(rest) > 1:
        ids = parse_job_ids(rest[1])
        rest = rest[2:]
    for word in rest:
        key, eq, value = word.partition("=")
        lower = key.lower()
        if not eq:
            raise Reported(f"Invalid input: {word}\nRequest aborted")
        if lower in ("jobid", "job"):
            ids = parse_job_ids(value)
        elif lower == "timelimit":
            try:
                limit = parse_duration(value)
            except InvalidOption:
                raise Reported(f"Invalid TimeLimit value: {value}") from None
            request["timeLimitS"] = str(-1 if limit == UNLIMITED else limit)
        elif lower == "partition":
            request["partitions"] = split_list(value)
        elif lower in ("name", "jobname"):
            request["name"] = value
        elif lower in ("priority", "nice", "numnodes"):
            if not value.lstrip("-").isdigit():
                raise Reported(f"Invalid {key} value: {value}")
            if lower == "priority":
                request["priority"] = int(value)
            elif lower == "nice":
                request["nice"] = int(value)
            else:
                request["numNodes"] = int(value)
        else:
            raise Reported(f"Update of this parameter is not supported: {word}\nRequest aborted")
    if not ids:
        raise Reported("No job id specified\nRequest aborted")
    request["jobIds"] = ids
    return request


def update_node_request(words: Sequence[str]) -> t.UpdateNodeRequest:
    """``update NodeName=n[1-2] State=DRAIN|RESUME|UNDRAIN|DOWN Reason=...`` as a request."""
    from corral import hostlist

    request: t.UpdateNodeRequest = {}
    for word in words:
        key, eq, value = word.partition("=")
        lower = key.lower()
        if not eq:
            raise Reported(f"Invalid input: {word}\nRequest aborted")
        if lower in ("nodename", "node"):
            try:
                request["names"] = hostlist.expand(value)
            except CorralError as exc:
                raise Reported(f"Invalid node name specified: {value} ({exc})") from None
        elif lower == "state":
            request["state"] = value.upper()
        elif lower == "reason":
            request["reason"] = value
        else:
            raise Reported(f"Update of this parameter is not supported: {word}\nRequest aborted")
    if not request.get("names"):
        raise Reported("No node name specified\nRequest aborted")
    if request.get("state") not in nodepower.NODE_UPDATE_STATES:
        raise Reported(f"Invalid node state specified: {request.get('state', '')}")
    return request


def update(words: Sequence[str]) -> int:
    if not words:
        raise Reported("too few arguments for keyword:update")
    if any(w.lower().startswith(("nodename=", "node=")) for w in words):
        client().update_node(update_node_request(words))
        return 0
    request = update_request(words)
    reply = client().update_job(request)
    lines = hold_messages(reply.get("outcomes", []))
    if lines:
        sys.stderr.write(
            "".join(line.replace("slurm_suspend", "slurm_update") + "\n" for line in lines)
        )
        return 1
    return 0


def top(words: Sequence[str]) -> int:
    if not words:
        raise Reported("too few arguments for keyword:top")
    ids = [i for w in words for i in parse_job_ids(w)]
    reply = client().update_job({"jobIds": ids, "action": "JOB_UPDATE_TOP"})
    lines = hold_messages(reply.get("outcomes", []))
    if lines:
        sys.stderr.write("".join(line + "\n" for line in lines))
        return 1
    return 0


def dispatch(words: Sequence[str], one_liner: bool) -> int:
    command = words[0].lower()
    if len(command) >= 3 and "show".startswith(command):
        return show(words[1:], one_liner)
    if command in HOLD_ACTIONS:
        return update_holds(command, words[1:])
    if len(command) >= 3 and "update".startswith(command):
        if any(w.lower().startswith("reservationname=") for w in words[1:]):
            from client import scontrol_resv

            scontrol_resv.update(words[1:])
            return 0
        return update(words[1:])
    if command == "create":
        from client import scontrol_resv

        sys.stdout.write(scontrol_resv.create(words[1:]))
        return 0
    if command == "delete":
        from client import scontrol_resv

        scontrol_resv.delete(words[1:])
        return 0
    if command == "top":
        return top(words[1:])
    if command == "power":  # scontrol power up|down [asap|force] NODELIST
        return nodepower.power(words[1:])
    if command == "ping":
        from client.ping import ping_all, ping_lines

        pinged = ping_all()
        sys.stdout.write(ping_lines(pinged))
        return 0 if any(p.primary for p in pinged) else 1
    if command in ("version", "-v"):
        sys.stdout.write(version_line())
        return 0
    raise Reported(f"invalid keyword: {words[0]}")


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...] [command]")
    # options may follow the command words too (getopt permutes, as in Slurm)
    flags = [a for a in argv if a.startswith("-") and a != "-"]
    opts: dict[str, Any]
    opts, _ = parser.parse(flags)
    words = [a for a in argv if a not in flags]
    if not words and not opts.get("version"):
        opts["help"] = True  # a bare scontrol: its help (no interactive mode here)
    if answered(parser, opts):
        return 0
    try:
        return dispatch(words, bool(opts.get("oneliner")))
    except Reported as exc:
        if not opts.get("quiet"):
            sys.stderr.write(exc.message + "\n")
        return 1


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
