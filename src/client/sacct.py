"""sacct: jobs from the durable store (QueryAccounting), in Slurm's fields and layouts.

Without -X each job that started gets its ``N.batch`` step line, as Slurm prints one
for every batch job. Output is a pure function of a QueryAccounting reply and its
``now`` (``format_accounting``); ``-P -n -o ...`` is what tools parse.
"""

from __future__ import annotations

import os
import sys
import time

from client.common import client, job_ref, job_state, num, real, run, text
from client.fmt import (
    SLURM_ACCT_FIELDS,
    acct_lines,
    convert_mb,
    group_name,
    limit_minutes,
    parse_acct_fields,
    parse_job_ids,
    parse_states,
    parse_users,
    split_list,
    wire_states,
)
from client.options import COUNT, FLAG, LIST, Option, OptionParser, answered
from corral.errors import InvalidOption
from corral.slurmfmt import CPU, format_duration, format_elapsed, format_timestamp, parse_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from client.common import Json
    from corral.wire import json_types as t

PROG = "sacct"
DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
PAGE = 5000  # jobs per QueryAccounting call (CORRAL_SACCT_PAGE overrides)
FIRST_PAGE = 200
BRIEF_FIELDS = "jobid,state,exitcode"
LONG_FIELDS = (
    "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,"
    "maxrss,maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,"
    "mincpu,mincpunode,mincputask,avecpu,ntasks,alloccpus,elapsed,state,exitcode,"
    "avecpufreq,reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,"
    "maxdiskread,maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,"
    "maxdiskwritenode,maxdiskwritetask,avediskwrite,reqtres,alloctres,tresusageinave,"
    "tresusageinmax,tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,"
    "tresusageinmint,tresusageintot,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,"
    "tresusageoutave,tresusageouttot"
)
ON_NODE = frozenset({"RUNNING", "COMPLETING"})


# ---------------------------------------------------------------- values


def spec_of(job: Json) -> Json:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def started(job: Json) -> bool:
    return bool(real(job, "startTime")) and job_state(job) != "PENDING"


def elapsed(job: Json, now: float) -> int:
    if not started(job):
        return 0
    end = real(job, "endTime")
    if job_state(job) in ON_NODE or not end:
        end = now
    return max(0, int(end - real(job, "startTime")))


def cancelled_by(job: Json) -> int:
    """The uid that cancelled the job (older records: its owner)."""
    who = num(job, "cancelledByUid", -1)
    return who if who >= 0 else num(job, "uid")


def exit_code(job: Json) -> str:
    return f"{num(job, 'exitCode')}:{num(job, 'exitSignal')}"


def derived_exit_code(job: Json) -> str:
    """Slurm's DerivedExitCode: the highest exit code of the job's srun steps, with the
    signal of that step (the batch script's own code is ExitCode); 0:0 without steps."""
    best = max(
        ((num(s, "exitCode"), num(s, "exitSignal")) for s in job.get("steps", [])),
        default=(0, 0),
    )
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


def job_tres(job: Json) -> str:
    return tres(
        num(job, "numCpus"),
        num(job, "memMb"),
        num(job, "numGpus"),
        num(job, "numNodes"),
        billing=True,
        mem=False,
    )


def timelimit(job: Json, raw: bool = False) -> str:
    limit = num(job, "timeLimitS")
    if limit < 0:
        return "UNLIMITED"
    if not limit:
        return "Partition_Limit"
    return str(limit_minutes(limit) // 60) if raw else format_elapsed(limit_minutes(limit))


def job_values(job: Json, now: float) -> dict[str, str]:
    """The job (allocation) line, by sacct field name; fields not here print empty."""
    spec = spec_of(job)
    state = job_state(job)
    ran = elapsed(job, now)
    cpus = num(job, "numCpus")
    job_id = str(num(job, "jobId"))
    return {
        "Account": text(job, "account"),
        "AllocCPUS": str(cpus),
        "AllocTRES": job_tres(job) if started(job) else "",
        "Cluster": text(job, "cluster"),
        "Comment": text(spec, "comment"),
        "Constraints": text(spec, "constraint"),
        "CPUTime": format_elapsed(ran * cpus),
        "CPUTimeRAW": str(ran * cpus),
        "DerivedExitCode": derived_exit_code(job),
        "Elapsed": format_elapsed(ran),
        "ElapsedRaw": str(ran),
        "Eligible": format_timestamp(real(job, "eligibleTime")),
        "End": "Unknown" if state in ON_NODE else format_timestamp(real(job, "endTime")),
        # Slurm's job line: 0:0 for a job ended by scancel (its end recorded when asked) or
        # its time limit (the signal shows on its batch step, CANCELLED 0:15)
        "ExitCode": "0:0" if state in ("CANCELLED", "TIMEOUT") else exit_code(job),
        "GID": str(num(job, "gid")),
        "Group": group_name(num(job, "gid")),
        "JobID": job_ref(job),
        "JobIDRaw": job_id,
        "JobName": text(spec, "name"),
        "NCPUS": str(cpus),
        "NNodes": str(num(job, "numNodes")),
        "NodeList": text(job, "nodelist") if started(job) else "None assigned",
        "Partition": text(job, "partition"),
        "Priority": str(num(job, "priority")),
        "QOS": text(job, "qos") or text(spec, "qos") or "normal",
        "Reason": text(job, "reason") or "None",
        "Restarts": str(num(job, "restartCount")),
        "ReqCPUS": str(cpus),
        "ReqMem": convert_mb(num(spec, "memPerNodeMb") or num(spec, "memPerCpuMb")),
        "ReqNodes": str(num(job, "numNodes")),
        "ReqTRES": job_tres(job),
        "Start": format_timestamp(real(job, "startTime")),
        # the uid of whoever cancelled is not recorded: the owner is the usual one
        "State": f"CANCELLED by {cancelled_by(job)}" if state == "CANCELLED" else state,
        "Submit": format_timestamp(real(job, "submitTime")),
        "SubmitLine": text(spec, "submitLine"),
        "Suspended": "00:00:00",
        "Timelimit": timelimit(job),
        "TimelimitRaw": timelimit(job, raw=True),
        "UID": str(num(job, "uid")),
        "User": text(job, "user"),
        "WCKey": text(spec, "wckey"),
        "WorkDir": text(spec, "workDir"),
        **{k: v for k, v in usage_values(job).items() if k.endswith("CPU")},
    }


def cpu_time(seconds: float) -> str:
    """Slurm's TotalCPU/UserCPU form: MM:SS.mmm under an hour, [D-]HH:MM:SS above."""
    return format_duration(seconds, CPU)


def usage_values(job: Json) -> dict[str, str]:
    """What noded measured (MaxRSS, TotalCPU, GPU figures), for the batch step's line."""
    usage: Json = job.get("usage") or {}
    if not usage:
        return {}
    user, system = real(usage, "userCpuS"), real(usage, "systemCpuS")
    max_rss, ave_rss = num(usage, "maxRssKb"), num(usage, "aveRssKb")
    gpus = bool(job.get("allocations")) and any(
        a.get("gpuIndices") for a in job.get("allocations", [])
    )
    in_max = [f"cpu={format_elapsed(int(user + system))}"]
    in_ave = list(in_max)
    if gpus:
        in_max += [
            f"gres/gpumem={round(real(usage, 'gpuMemMaxMb'))}M",
            f"gres/gpuutil={round(real(usage, 'gpuUtilMax'))}",
        ]
        in_ave += [
            f"gres/gpumem={round(real(usage, 'gpuMemMeanMb'))}M",
            f"gres/gpuutil={round(real(usage, 'gpuUtilMean'))}",
        ]
    in_max.append(f"mem={max_rss}K")
    in_ave.append(f"mem={ave_rss}K")
    return {
        "MaxRSS": f"{max_rss}K",
        "AveRSS": f"{ave_rss}K",
        "MaxRSSNode": text(job, "batchHost"),
        "MaxRSSTask": "0",
        "TotalCPU": cpu_time(user + system),
        "UserCPU": cpu_time(user),
        "SystemCPU": cpu_time(system),
        "TRESUsageInMax": ",".join(in_max),
        "TRESUsageInAve": ",".join(in_ave),
        "TRESUsageInTot": ",".join(in_ave),
    }


def batch_allocation(job: Json) -> tuple[int, int, int]:
    """CPUs, memory and GPUs on the batch host (where the batch step runs)."""
    host = text(job, "batchHost")
    for alloc in job.get("allocations", []):
        if text(alloc, "node") == host:
            return num(alloc, "cpus"), num(alloc, "memMb"), len(alloc.get("gpuIndices", []))
    return num(job, "numCpus"), num(job, "memMb"), num(job, "numGpus")


def step_values(job: Json, now: float) -> dict[str, str]:
    """The ``N.batch`` step line: the batch script on its host, as Slurm prints it."""
    cpus, mem_mb, gpus = batch_allocation(job)
    ran = elapsed(job, now)
    step_id = f"{job_ref(job)}.batch"  # 11_1.batch: tools group steps by their job's id
    state = job_state(job)
    start = real(job, "startTime")
    return {
        "Account": text(job, "account"),
        "AllocCPUS": str(cpus),
        "AllocTRES": tres(cpus, mem_mb, gpus, 1, billing=False, mem=True),
        "Cluster": text(job, "cluster"),
        "CPUTime": format_elapsed(ran * cpus),
        "CPUTimeRAW": str(ran * cpus),
        "Elapsed": format_elapsed(ran),
        "ElapsedRaw": str(ran),
        "Eligible": format_timestamp(start),
        "End": "Unknown" if state in ON_NODE else format_timestamp(real(job, "endTime")),
        "ExitCode": exit_code(job),
        "JobID": step_id,
        "JobIDRaw": f"{num(job, 'jobId')}.batch",
        "JobName": "batch",
        "NCPUS": str(cpus),
        "NNodes": "1",
        "NodeList": text(job, "batchHost"),
        "NTasks": "1",
        "Start": format_timestamp(start),
        "State": "CANCELLED" if state == "TIMEOUT" else state,
        "Submit": format_timestamp(start),
        "Suspended": "00:00:00",
        **usage_values(job),
    }


def srun_step_values(job: Json, step: Json, now: float) -> dict[str, str]:
    """An ``N.S`` line: a step srun ran."""
    state = job_state(step)
    start, end = real(step, "startTime"), real(step, "endTime")
    ran = int((end or now) - start) if start else 0
    nodes = step.get("nodes", [])
    cpus = sum(num(n, "cpus") for n in nodes)
    gpus = sum(len(n.get("gpuIndices", [])) for n in nodes)
    step_id = f"{job_ref(job)}.{num(step, 'stepId')}"
    return {
        "Account": text(job, "account"),
        "AllocCPUS": str(cpus),
        "AllocTRES": tres(cpus, 0, gpus, len(nodes), billing=False, mem=False),
        "Cluster": text(job, "cluster"),
        "CPUTime": format_elapsed(ran * cpus),
        "CPUTimeRAW": str(ran * cpus),
        "Elapsed": format_elapsed(ran),
        "ElapsedRaw": str(ran),
        "End": "Unknown" if state == "RUNNING" else format_timestamp(end),
        "ExitCode": f"{num(step, 'exitCode')}:{num(step, 'exitSignal')}",
        "JobID": step_id,
        "JobIDRaw": f"{num(job, 'jobId')}.{num(step, 'stepId')}",
        "JobName": text(step, "name"),
        "NCPUS": str(cpus),
        "NNodes": str(len(step.get("nodes", []))),
        "NodeList": text(step, "nodelist"),
        "NTasks": str(num(step, "ntasks")),
        "Partition": text(job, "partition"),
        "Reason": text(step, "reason") or "None",  # a node's refusal to start it
        "Start": format_timestamp(start),
        "State": state,
        "Submit": format_timestamp(start),
        "SubmitLine": text(step.get("spec") or {}, "submitLine"),
        "Suspended": "00:00:00",
        "User": text(job, "user"),
    }


def format_accounting(
    reply: Json,
    field_spec: str = DEFAULT_FIELDS,
    *,
    steps: bool = True,
    header: bool = True,
    parsable: str = "",
    delimiter: str = "|",
) -> str:
    """The whole output (with newlines) for a QueryAccounting reply."""
    fields = parse_acct_fields(field_spec)
    now = real(reply, "now")
    rows: list[list[str]] = []
    for job in reply.get("jobs", []):
        values = [job_values(job, now)]
        if steps and started(job) and not (job.get("spec") or {}).get("allocationOnly"):
            values.append(step_values(job, now))
        if steps:
            values.extend(srun_step_values(job, s, now) for s in job.get("steps", []))
        rows.extend([v.get(f.name, "") for f in fields] for v in values)
    lines = acct_lines(fields, rows, header=header, parsable=parsable, delimiter=delimiter)
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------- time window

_RELATIVE = r"now([+-])(\d+)(seconds?|minutes?|hours?|days?|weeks?)?"
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE = r"(\d\d)[/.]?(\d\d)(?:[/.]?(\d\d))?(?:-(\d{1,2}):(\d\d)(?::(\d\d))?)?"


def midnight(now: float) -> float:
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


def parse_when(value: str, now: float) -> float:
    """-S/-E times, meant in the past as sacct means them: ``now-2hours``, ``HH:MM``
    (today), ``MM/DD[/YY]``, ``MMDD[YY]``, ``YYYY-MM-DD[THH:MM[:SS]]``, ``midnight``."""
    import re  # only with -S/-E: every other sacct call starts without it

    s = value.strip()
    rel = re.fullmatch(_RELATIVE, s, re.IGNORECASE)
    if rel:
        step = int(rel.group(2)) * _UNIT_S[(rel.group(3) or "s")[0].lower()]
        return now + step if rel.group(1) == "+" else now - step
    if s.lower() in ("today", "midnight"):
        return midnight(now)
    date = re.fullmatch(_DATE, s)
    if date and not re.fullmatch(r"\d{1,2}:\d\d(:\d\d)?", s):
        return _month_day(date.groups(), now, value)
    try:
        when = parse_timestamp(s, now=now, what="time")
    except InvalidOption:
        raise InvalidOption(f"Invalid time specification: {value}") from None
    if re.fullmatch(r"\d{1,2}:\d\d(:\d\d)?", s) and when > now:
        when -= 86400  # sacct means today's HH:MM, not tomorrow's
    return when


def _month_day(groups: Sequence[str | None], now: float, value: str) -> float:
    month, day, year, hh, mm, ss = (int(g) if g else None for g in groups)
    yr = 2000 + year if year is not None else time.localtime(now).tm_year
    try:
        return time.mktime((yr, month or 0, day or 0, hh or 0, mm or 0, ss or 0, 0, 0, -1))
    except (OverflowError, ValueError):
        raise InvalidOption(f"Invalid time specification: {value}") from None


def window(opts: dict[str, Any], now: float) -> tuple[float, float]:
    """Slurm's defaults for -S/-E: with -s and no -j the window is now; with neither
    -s nor -j it starts at midnight; with -j alone it is all time."""
    start = parse_when(opts["starttime"], now) if opts.get("starttime") else 0.0
    end = parse_when(opts["endtime"], now) if opts.get("endtime") else 0.0
    if opts.get("state"):
        if not start and not opts.get("jobs"):
            start = now
        if start and not end:
            end = start
    elif not opts.get("jobs") and not start:
        start = midnight(now)
    if end and start > end:
        raise InvalidOption(
            f"Start time ({format_timestamp(start)}) requested is after end time "
            f"({format_timestamp(end)})."
        )
    return start, end


# ---------------------------------------------------------------- command line

OPTIONS = (
    Option("a", "allusers", "allusers", FLAG, help="jobs of every user"),
    Option("A", "accounts", "accounts", LIST, help="only these accounts"),
    Option("b", "brief", "brief", FLAG, help="jobid, state and exit code only"),
    Option("", "delimiter", "delimiter", help="field separator of -p/-P (default |)"),
    Option("e", "helpformat", "helpformat", FLAG, help="list the fields -o takes"),
    Option("E", "endtime", "endtime", help="jobs submitted before this time"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("j", "jobs", "jobs", LIST, help="comma separated list of job ids"),
    Option("l", "long", "long", FLAG, help="many fields"),
    Option("L", "allclusters", "allclusters", FLAG, help="(no effect: one cluster)"),
    Option("n", "noheader", "noheader", FLAG, help="no header lines"),
    Option("", "name", "name", LIST, help="only jobs with these names"),
    Option("o", "format", "format", help="comma separated fields, Field%width"),
    Option("p", "parsable", "parsable", FLAG, help="'|' after every field"),
    Option("P", "parsable2", "parsable2", FLAG, help="'|' between fields"),
    Option("r", "partition", "partition", LIST, help="only these partitions"),
    Option("s", "state", "state", LIST, help="only jobs in these states"),
    Option("S", "starttime", "starttime", help="jobs running or ended after this time"),
    Option("u", "user", "user", LIST, help="only these users (names or uids)"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("X", "allocations", "allocations", FLAG, help="no step lines"),
    Option("D", "duplicates", "duplicates", FLAG, help="each earlier run of requeued jobs too"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def help_fields() -> str:
    """``-e``: every field name, four to a line, as Slurm lists them."""
    names = [f"{name:<19}" for name, _, _ in SLURM_ACCT_FIELDS]
    rows = [" ".join(names[i : i + 4]) for i in range(0, len(names), 4)]
    return "\n".join(rows) + "\n"


def field_spec(opts: dict[str, Any]) -> str:
    if opts.get("long") and opts.get("format"):
        raise InvalidOption(
            "Options -o(--format) and -l(--long) are mutually exclusive. "
            "Please remove one and retry."
        )
    parts = [BRIEF_FIELDS] if opts.get("brief") else []
    if opts.get("long"):
        parts.append(LONG_FIELDS)
    if opts.get("format"):
        parts.append(opts["format"])
    if not parts:
        parts.append(os.environ.get("SACCT_FORMAT") or DEFAULT_FIELDS)
    return ",".join(parts)


def build_request(opts: dict[str, Any], me: str, uid: int, now: float) -> t.QueryAccountingRequest:
    flt: t.JobFilter = {}
    if opts.get("jobs"):
        flt["jobIds"] = parse_job_ids(opts["jobs"])
    if opts.get("user"):
        flt["users"] = parse_users(opts["user"])
    elif not opts.get("allusers") and not opts.get("jobs") and uid != 0:
        flt["users"] = [me]  # as Slurm: a user sees their own jobs unless asking for more
    if opts.get("state"):
        states = parse_states(opts["state"])
        if states is not None:
            flt["states"] = wire_states(states) or ["JOB_STATE_UNSPECIFIED"]
    # the store filters these too (indexed), so sacct -A over a big history stays small
    for key, wire in (("accounts", "accounts"), ("partition", "partitions"), ("name", "names")):
        if opts.get(key):
            flt[wire] = split_list(opts[key])  # type: ignore[literal-required]
    request: t.QueryAccountingRequest = {"filter": flt}
    if opts.get("duplicates"):
        request["duplicates"] = True
    start, end = window(opts, now)
    if start:
        request["startAfter"] = start
    if end:
        request["endBefore"] = end
    return request


def keep_matching(reply: Json, opts: dict[str, Any]) -> Json:
    """Filters the store does not apply: accounts, partitions, names."""
    tests: list[Callable[[Json], bool]] = []
    if opts.get("accounts"):
        accounts = set(split_list(opts["accounts"]))
        tests.append(lambda j: text(j, "account") in accounts)
    if opts.get("partition"):
        parts = set(split_list(opts["partition"]))
        tests.append(lambda j: text(j, "partition") in parts)
    if opts.get("name"):
        names = set(split_list(opts["name"]))
        tests.append(lambda j: text(spec_of(j), "name") in names)
    if not tests:
        return reply
    jobs = [j for j in reply.get("jobs", []) if all(t(j) for t in tests)]
    return {**reply, "jobs": jobs}


def with_array_tasks(api: Any, request: Json, reply: Json, wanted: str) -> Json:
    """``-j 11`` of an array lists every task, ``-j 11_2`` that task only (Slurm's).

    Tasks have consecutive raw ids from the array's id, as many as ``--array`` names,
    so one more query over that range finds them all (the count ctld typed at submit)."""
    arrays: dict[int, int] = {}  # array id -> task count
    for job in reply.get("jobs", []):
        master = num(job, "arrayJobId")
        if master and master == num(job, "jobId"):
            typed = spec_of(job).get("arrayTasks")
            if isinstance(typed, dict) and num(typed, "count"):
                arrays[master] = num(typed, "count")
    if not arrays:
        return reply
    ids = sorted({str(m + i) for m, n in arrays.items() for i in range(n)})
    extra = api.query_accounting({**request, "filter": {**request["filter"], "jobIds": ids}})
    by_id = {num(j, "jobId"): j for j in [*reply.get("jobs", []), *extra.get("jobs", [])]}
    keep: list[Json] = []
    for item in split_list(wanted):
        base, _, task = item.split(".")[0].partition("_")
        if not base.isdigit():
            continue
        for job in sorted(by_id.values(), key=lambda j: num(j, "jobId")):
            whole = not task and (
                num(job, "jobId") == int(base) or num(job, "arrayJobId") == int(base)
            )
            one = (
                task.isdigit()
                and num(job, "arrayJobId") == int(base)
                and "arrayTaskId" in job
                and num(job, "arrayTaskId") == int(task)
            )
            if (whole or one) and job not in keep:
                keep.append(job)
    return {**reply, "jobs": keep}


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts, rest = parser.parse(argv)
    if answered(parser, opts):
        return 0
    if opts.get("helpformat"):
        sys.stdout.write(help_fields())
        return 0
    if rest:
        raise InvalidOption(f"Unknown arguments: {' '.join(rest)}")
    fields = field_spec(opts)
    parse_acct_fields(fields)  # a bad field fails before the controller is asked
    api = client()
    request = build_request(opts, api.identity.user, api.identity.uid, time.time())
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else ""
    # page by page, each printed as it comes: the columns have fixed widths, so the
    # first lines of a long history show at once and memory stays one page
    fixed = int(os.environ.get("CORRAL_SACCT_PAGE") or 0)
    page_size = fixed or FIRST_PAGE  # a small first page: the first lines come quickly
    header = not opts.get("noheader")
    while True:
        request["limit"] = page_size
        reply: Json = api.query_accounting(request)
        page = reply.get("jobs", [])
        if opts.get("jobs"):
            reply = with_array_tasks(api, request, reply, opts["jobs"])
        sys.stdout.write(
            format_accounting(
                keep_matching(reply, opts),
                fields,
                steps=not opts.get("allocations"),
                header=header,
                parsable=parsable,
                delimiter=opts.get("delimiter") or "|",
            )
        )
        header = False
        if len({num(j, "jobId") for j in page}) < page_size:
            return 0
        sys.stdout.flush()
        request["afterJobId"] = str(num(page[-1], "jobId"))
        page_size = fixed or PAGE


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
