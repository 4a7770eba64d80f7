"""squeue: the jobs ctld holds, in Slurm's columns (``-o`` formats, filters, sorting).

Output is a pure function of a GetJobs response and its ``now`` (``format_jobs``), so
what scripts parse (``squeue -h -o "%i %t"``) is tested byte for byte without a cluster.
"""

from __future__ import annotations

import os
import sys

from client.common import JOB_STATE_CODES, client, job_ref, job_state, num, real, run, text
from client.fmt import (
    Column,
    Reported,
    Spec,
    all_letters,
    call,
    check_format,
    convert_mb,
    ctime,
    gpu_tres,
    group_name,
    job_filter,
    limit_minutes,
    or_null,
    parse_format,
    parse_states,
    parse_users,
    render,
    renderer,
    split_list,
    squeue_secs,
    wire_states,
)
from client.options import COUNT, FLAG, Option, OptionParser, parse_command
from corral.errors import InvalidOption
from corral.slurmfmt import format_duration, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from typing import Any

    from client.common import Json
    from corral.wire import json_types as t

PROG = "squeue"
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %.20Y %R"  # squeue --start
DEFAULT_SORT = "P,t,-p"  # partition, state, priority (highest first)
#: What squeue lists when no -t is given, as Slurm.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT"})
#: States whose NODELIST(REASON) column shows the reason, not the nodes.
REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "FAILED", "DEADLINE"})
ON_NODE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


class Row:
    """A job and the controller's clock: everything a column needs."""

    __slots__ = ("job", "now", "ref", "spec")

    def __init__(self, job: Json, now: float, ref: str = "") -> None:
        self.job = job
        self.now = now
        self.ref = ref or job_ref(job)
        spec = job.get("spec")
        self.spec: Json = spec if isinstance(spec, dict) else {}


# ---------------------------------------------------------------- job values


def elapsed(job: Json, now: float) -> float:
    """Seconds the job has run (0 while pending), as squeue's TIME."""
    start = real(job, "startTime")
    if not start or job_state(job) == "PENDING":
        return 0.0
    end = real(job, "endTime")
    if job_state(job) in ON_NODE or not end:
        end = now
    return max(0.0, end - start)


def time_limit(job: Json) -> str:
    limit = num(job, "timeLimitS")
    if limit < 0:
        return "UNLIMITED"
    return squeue_secs(limit_minutes(limit)) if limit else "NOT_SET"


def time_left(row: Row) -> str:
    limit = num(row.job, "timeLimitS")
    if limit < 0:
        return "UNLIMITED"
    if not limit:
        return "NOT_SET"
    return squeue_secs(limit - int(elapsed(row.job, row.now)))


def end_time(job: Json) -> str:
    """END_TIME: the expected end of a running job (NONE without a limit), else its end."""
    if job_state(job) in ON_NODE:
        limit = num(job, "timeLimitS")
        if limit < 0:
            return "NONE"
        return format_timestamp(real(job, "startTime") + limit)
    return format_timestamp(real(job, "endTime"), unknown="N/A")


def start_time(job: Json) -> float:
    """When it started, or (pending) when the backfill pass expects it to."""
    if job_state(job) == "PENDING":
        return real(job, "expectedStart")
    return real(job, "startTime")


def reason(job: Json) -> str:
    return text(job, "reason") or "None"


def reason_or_nodes(job: Json) -> str:
    if job_state(job) in REASON_STATES:
        return f"({reason(job)})"
    return text(job, "nodelist")


def tres_per_node(spec: Json) -> str:
    gpus = num(spec, "gpusPerNode")
    if num(spec, "shardsPerNode"):
        return f"gres:shard:{num(spec, 'shardsPerNode')}"
    return gpu_tres(gpus, text(spec, "gpuType")) if gpus else "N/A"


def min_memory(spec: Json) -> str:
    return convert_mb(num(spec, "memPerNodeMb") or num(spec, "memPerCpuMb"))


def min_cpus(spec: Json) -> str:
    return str(max(1, num(spec, "cpusPerTask")) * max(1, num(spec, "ntasksPerNode")))


def priority_share(job: Json) -> str:
    """%p: the priority as a fraction of the largest one (Slurm's 14 decimals)."""
    return f"{num(job, 'priority') / 0xFFFFFFFF:16.14f}"


def _col(header: str, value: Callable[[Row], str], **kw: bool) -> Column:
    return Column(header, value, **kw)


def _job(key: str) -> Callable[[Row], str]:
    return lambda r: text(r.job, key)


def _spec(key: str, null: bool = False) -> Callable[[Row], str]:
    if null:
        return lambda r: or_null(text(r.spec, key))
    return lambda r: text(r.spec, key)


def _number(key: str) -> Callable[[Row], str]:
    return lambda r: str(num(r.job, key))


def _const(value: str) -> Callable[[Row], str]:
    return lambda r: value


COLUMNS: dict[str, Column] = {
    "a": _col("ACCOUNT", lambda r: or_null(text(r.job, "account"))),
    "A": _col("JOBID", lambda r: str(num(r.job, "jobId"))),
    "b": _col("TRES_PER_NODE", lambda r: tres_per_node(r.spec)),
    "B": _col("EXEC_HOST", lambda r: text(r.job, "batchHost") or "n/a"),
    "c": _col("MIN_CPUS", lambda r: min_cpus(r.spec)),
    "C": _col("CPUS", _number("numCpus")),
    "d": _col("MIN_TMP_DISK", _const("0")),
    "D": _col("NODES", _number("numNodes")),
    "e": _col("END_TIME", lambda r: end_time(r.job)),
    "E": _col("DEPENDENCY", _spec("dependency", null=True)),
    "f": _col("FEATURES", _spec("constraint", null=True)),
    "F": _col("ARRAY_JOB_ID", lambda r: str(num(r.job, "arrayJobId") or num(r.job, "jobId"))),
    "g": _col("GROUP", lambda r: group_name(num(r.job, "gid"))),
    "G": _col("GROUP", _number("gid")),
    "h": _col("OVER_SUBSCRIBE", lambda r: "NO" if r.spec.get("exclusive") else "OK"),
    "H": _col("SOCKETS_PER_NODE", _const("*")),
    "i": _col("JOBID", lambda r: r.ref, cut=False),
    "I": _col("CORES_PER_SOCKET", _const("*")),
    "j": _col("NAME", _spec("name")),
    "J": _col("THREADS_PER_CORE", _const("*")),
    "k": _col("COMMENT", _spec("comment", null=True)),
    "K": _col("ARRAY_TASK_ID", lambda r: r.ref.partition("_")[2] or "N/A"),
    "l": _col("TIME_LIMIT", lambda r: time_limit(r.job), cut=False),
    "L": _col("TIME_LEFT", time_left, cut=False),
    "m": _col("MIN_MEMORY", lambda r: min_memory(r.spec)),
    "M": _col("TIME", lambda r: squeue_secs(elapsed(r.job, r.now)), cut=False),
    "n": _col("REQ_NODES", _spec("nodelist")),
    "N": _col("NODELIST", _job("nodelist"), cut=False, header_cut=False),
    "o": _col("COMMAND", lambda r: text(r.job.get("spec") or {}, "command") or "(null)"),
    "O": _col("CONTIGUOUS", _const("0")),
    "p": _col("PRIORITY", lambda r: priority_share(r.job)),
    "P": _col("PARTITION", _job("partition")),
    "q": _col("QOS", lambda r: or_null(text(r.job, "qos") or text(r.spec, "qos"))),
    "Q": _col("PRIORITY", _number("priority")),
    "r": _col("REASON", lambda r: reason(r.job)),
    "R": _col("NODELIST(REASON)", lambda r: reason_or_nodes(r.job), header_cut=False),
    "S": _col("START_TIME", lambda r: format_timestamp(start_time(r.job), unknown="N/A")),
    "t": _col("ST", lambda r: JOB_STATE_CODES.get(job_state(r.job), "?")),
    "T": _col("STATE", lambda r: job_state(r.job)),
    "u": _col("USER", _job("user")),
    "U": _col("UID", _number("uid")),
    "v": _col("RESERVATION", _spec("reservation", null=True)),
    "V": _col("SUBMIT_TIME", lambda r: format_timestamp(real(r.job, "submitTime"), unknown="N/A")),
    "w": _col("WCKEY", _spec("wckey", null=True)),
    "W": _col("LICENSES", _const("(null)")),
    "x": _col("EXC_NODES", _spec("exclude")),
    "X": _col("CORE_SPEC", _const("N/A")),
    "y": _col("NICE", lambda r: str(num(r.spec, "nice"))),
    "Y": _col("SCHEDNODES", lambda r: or_null(text(r.job, "forecastNodes"))),
    "z": _col("S:C:T", _const("*:*:*")),
    "Z": _col("WORK_DIR", _spec("workDir")),
}


# ---------------------------------------------------------------- sorting


def _sort_keys() -> dict[str, Callable[[Row], Any]]:
    return {
        "C": lambda r: num(r.job, "numCpus"),
        "D": lambda r: num(r.job, "numNodes"),
        "e": lambda r: real(r.job, "endTime"),
        "i": lambda r: num(r.job, "jobId"),
        "j": lambda r: text(r.spec, "name"),
        "l": lambda r: num(r.job, "timeLimitS"),
        "M": lambda r: elapsed(r.job, r.now),
        "N": lambda r: text(r.job, "nodelist"),
        "p": lambda r: num(r.job, "priority"),
        "P": lambda r: text(r.job, "partition"),
        "Q": lambda r: num(r.job, "priority"),
        "S": lambda r: start_time(r.job),
        "t": lambda r: JOB_STATE_CODES.get(job_state(r.job), ""),
        "T": lambda r: job_state(r.job),
        "u": lambda r: text(r.job, "user"),
        "U": lambda r: num(r.job, "uid"),
        "V": lambda r: real(r.job, "submitTime"),
    }


def sort_rows(rows: list[Row], order: str) -> list[Row]:
    """Sort as ``-S`` says: field letters (commas optional), ``-`` before one for
    descending, the first the most significant; stable sorts from the last key to the
    first, as Slurm."""
    keys = _sort_keys()
    wanted: list[tuple[str, bool]] = []
    for i, ch in enumerate(order):
        if ch in ",+- ":
            continue
        if ch not in keys:
            raise InvalidOption(f"Invalid sort specification: {ch}")
        wanted.append((ch, i > 0 and order[i - 1] == "-"))
    out = list(rows)
    for letter, descending in reversed(wanted):
        out.sort(key=keys[letter], reverse=descending)
    return out


# ---------------------------------------------------------------- output


def collapse_arrays(rows: list[Row]) -> list[Row]:
    """An array's pending tasks with the same reason as one row, ``120_[3-9,12]``, as
    squeue shows them unless -r; running and finished tasks keep their own rows."""
    groups: dict[tuple[int, str], list[Row]] = {}
    out: list[Row] = []
    for row in rows:
        job = row.job
        if "arrayTaskId" in job and job_state(job) == "PENDING":
            key = (num(job, "arrayJobId"), text(job, "reason"))
            if key not in groups:
                groups[key] = []
                out.append(row)  # placeholder, replaced below
            groups[key].append(row)
        else:
            out.append(row)
    for (array_id, _), members in groups.items():
        if len(members) == 1:
            continue
        tasks = sorted(num(m.job, "arrayTaskId") for m in members)
        first = members[0]
        merged = Row(first.job, first.now, f"{array_id}_[{_ranges(tasks)}]")
        out[out.index(first)] = merged
    return out


def _ranges(values: list[int]) -> str:
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def wanted(job: Json, states: Collection[str] | None) -> bool:
    """The state filter: -t's states, everything for ``all``, else the active ones."""
    if states is None:
        return True
    return job_state(job) in states


def format_jobs(
    reply: Json,
    fmt: str | list[Spec] = DEFAULT_FORMAT,
    *,
    header: bool = True,
    states: Collection[str] | None = ACTIVE_STATES,
    sort: str = DEFAULT_SORT,
    long_date: bool = False,
    expand_arrays: bool = False,
) -> str:
    """The whole output for a GetJobs reply (with newlines); ``fmt`` is an -o string or
    the specs of an -O list (``long_format``)."""
    columns = COLUMNS
    if isinstance(fmt, list):
        prefix, specs, columns = "", fmt, {**COLUMNS, **LONG_COLUMNS}
    else:
        if fmt.lower() == "%all":
            fmt = all_letters(COLUMNS)
        prefix, specs = parse_format(fmt)
        check_format(specs, COLUMNS, "job")
    now = real(reply, "now")
    rows = [Row(j, now) for j in reply.get("jobs", []) if wanted(j, states)]
    if not expand_arrays:
        rows = collapse_arrays(rows)
    rows = sort_rows(rows, sort)
    lines = [ctime(now)] if long_date and header else []
    if header:
        lines.append(render(prefix, specs, columns, None))
    lines.extend(map(renderer(prefix, specs, columns), rows))
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------- -O / --Format

# Slurm 22.05's -O field names (matched without case, '-' or '_': `tres-per-node`,
# `exit_code`, and the older `TresPerNode` spelling) and the -o letter printing the same
FIELD_LETTERS = {
    "account": "a",
    "arrayjobid": "F",
    "arraytaskid": "K",
    "batchhost": "B",
    "command": "o",
    "comment": "k",
    "contiguous": "O",
    "cores": "I",
    "corespec": "X",
    "dependency": "E",
    "endtime": "e",
    "exechost": "B",
    "excnodes": "x",
    "feature": "f",
    "features": "f",
    "groupid": "G",
    "groupname": "g",
    "jobarrayid": "i",
    "jobid": "i",
    "licenses": "W",
    "mincpus": "c",
    "minmemory": "m",
    "mintmpdisk": "d",
    "name": "j",
    "nice": "y",
    "nodelist": "N",
    "numcpus": "C",
    "numnodes": "D",
    "oversubscribe": "h",
    "partition": "P",
    "priority": "p",
    "prioritylong": "Q",
    "qos": "q",
    "reason": "r",
    "reasonlist": "R",
    "reqnodes": "n",
    "reservation": "v",
    "schednodes": "Y",
    "sct": "z",
    "sockets": "H",
    "starttime": "S",
    "state": "T",
    "statecompact": "t",
    "submittime": "V",
    "threads": "J",
    "timeleft": "L",
    "timelimit": "l",
    "timeused": "M",
    "trespernode": "b",
    "userid": "U",
    "username": "u",
    "wckey": "w",
    "workdir": "Z",
}


def _gpus_or_na(count: int, spec: Json) -> str:
    return gpu_tres(count, text(spec, "gpuType")) if count else "N/A"


def _std_path(row: Row, which: int) -> str:
    from client.scontrol import std_paths  # only for these fields: squeue stays light

    return std_paths(row.job)[which]


def _tres_alloc(row: Row) -> str:
    from client.scontrol import job_tres

    return job_tres(row.job)


def _pending_time(row: Row) -> str:
    """Seconds from submission to start (or to now while pending), as Slurm counts."""
    start = real(row.job, "startTime") if job_state(row.job) != "PENDING" else 0.0
    return str(max(0, int((start or row.now) - real(row.job, "submitTime"))))


def _exit_status(job: Json) -> str:
    """EXIT_CODE: the raw wait status, as Slurm's squeue prints it (exit 3 is 768)."""
    return str((num(job, "exitCode") & 0xFF) << 8 | num(job, "exitSignal") & 0x7F)


# -O fields with no -o letter, under Slurm's headers
LONG_COLUMNS: dict[str, Column] = {
    "accruetime": _col(
        "ACCRUE_TIME", lambda r: format_timestamp(real(r.job, "eligibleTime"), unknown="N/A")
    ),
    "admincomment": _col("ADMIN_COMMENT", _const("(null)")),
    "allocnodes": _col("ALLOC_NODES", _spec("submitHost")),
    "batchflag": _col("BATCH_FLAG", lambda r: "0" if r.spec.get("allocationOnly") else "1"),
    "boardspernode": _col("BOARDS_PER_NODE", _const("0")),
    "burstbuffer": _col("BURST_BUFFER", _const("(null)")),
    "cluster": _col("CLUSTER", _job("cluster")),
    "cpuspertask": _col("CPUS_PER_TASK", lambda r: str(max(1, num(r.spec, "cpusPerTask")))),
    "cpuspertres": _col("CPUS_PER_TRES", _const("N/A")),
    "deadline": _col("DEADLINE", _const("N/A")),
    "derivedec": _col("DERIVED_EC", _const("0")),
    "eligibletime": _col(
        "ELIGIBLE_TIME", lambda r: format_timestamp(real(r.job, "eligibleTime"), unknown="N/A")
    ),
    "exitcode": _col("EXIT_CODE", lambda r: _exit_status(r.job)),
    "maxcpus": _col("MAX_CPUS", _number("numCpus")),
    "maxnodes": _col(
        "MAX_NODES",
        lambda r: str(num(r.spec, "nodesMax") or num(r.spec, "nodesMin") or num(r.job, "numNodes")),
    ),
    "mempertres": _col("MEM_PER_TRES", _const("N/A")),
    "mintime": _col("TIME_MIN", _const("0:00")),
    "network": _col("NETWORK", _const("(null)")),
    "ntperboard": _col("NTASKS_PER_BOARD", _const("0")),
    "ntpercore": _col("NTASKS_PER_CORE", _const("N/A")),
    "ntpernode": _col("NTASKS_PER_NODE", lambda r: str(num(r.spec, "ntasksPerNode"))),
    "ntpersocket": _col("NTASKS_PER_SOCKET", _const("N/A")),
    "numtasks": _col("TASKS", lambda r: str(num(r.job, "numTasks") or num(r.spec, "ntasks") or 1)),
    "pendingtime": _col("PENDING_TIME", _pending_time),
    "preempttime": _col("PREEMPT_TIME", _const("N/A")),
    "profile": _col("PROFILE", _const("NotSet")),
    "reboot": _col("REBOOT", _const("0")),
    "reqswitch": _col("REQ_SWITCH", _const("0")),
    "requeue": _col("REQUEUE", lambda r: "0" if r.spec.get("noRequeue") else "1"),
    "resizetime": _col("RESIZE_TIME", _const("N/A")),
    "restartcnt": _col("RESTART_COUNT", _number("restartCount")),
    "sperboard": _col("SOCKETS_PER_BOARD", _const("0")),
    "stderr": _col("STDERR", lambda r: _std_path(r, 0)),
    "stdin": _col("STDIN", lambda r: _std_path(r, 1)),
    "stdout": _col("STDOUT", lambda r: _std_path(r, 2)),
    "systemcomment": _col("SYSTEM_COMMENT", _const("(null)")),
    "tresalloc": _col("TRES_ALLOC", _tres_alloc),
    "tresbind": _col("TRES_BIND", _const("N/A")),
    "tresfreq": _col("TRES_FREQ", _const("N/A")),
    "tresperjob": _col("TRES_PER_JOB", lambda r: _gpus_or_na(num(r.spec, "gpus"), r.spec)),
    "trespersocket": _col("TRES_PER_SOCKET", _const("N/A")),
    "trespertask": _col("TRES_PER_TASK", lambda r: _gpus_or_na(num(r.spec, "gpusPerTask"), r.spec)),
    "wait4switch": _col("WAIT4SWITCH", _const("0:00")),
}


def long_format(text: str) -> list[Spec]:
    """``-O JobID:10,Name:.20,State`` as format specs. As Slurm: each field is SIZE wide
    (20 when not given; ``.`` right-justifies), then its suffix; nothing else separates
    the fields. A field is an -o letter's column or one of ``LONG_COLUMNS``; an unknown
    one is reported and left out (Slurm 22.05 goes on without it and exits 0), and only
    a format left with no field at all is an error."""
    out: list[Spec] = []
    for item in (x for x in text.split(",") if x.strip()):
        name, _, rest = item.strip().partition(":")
        key = name.lower().replace("-", "").replace("_", "")
        letter = FIELD_LETTERS.get(key) or (key if key in LONG_COLUMNS else None)
        if letter is None:
            sys.stderr.write(f"squeue: error: Invalid job format specification: {name}\n")
            continue
        right = rest.startswith(".")
        rest = rest[1:] if right else rest
        digits = len(rest) - len(rest.lstrip("0123456789"))
        size, suffix = (int(rest[:digits]) if digits else 20), rest[digits:]
        out.append(Spec(letter, size, right, suffix))
    if not out:
        raise InvalidOption("Invalid job format specification: (empty)")
    return out


# ---------------------------------------------------------------- command line

OPTIONS = (
    Option("A", "account", "account", help="comma separated list of accounts"),
    Option("a", "all", "all", FLAG, help="(no effect: every partition is shown)"),
    Option("h", "noheader", "noheader", FLAG, help="no header line"),
    Option("j", "jobs", "jobs", help="comma separated list of job ids"),
    Option("l", "long", "long", FLAG, help="long format, with a date line"),
    Option("", "me", "me", FLAG, help="only the caller's jobs"),
    Option("n", "name", "name", help="comma separated list of job names"),
    Option("o", "format", "format", help="output format (%[.][size]type)"),
    Option("O", "Format", "long_format", help="output fields (Field[:[.][size][suffix]],...)"),
    Option("p", "partition", "partition", help="comma separated list of partitions"),
    Option("r", "array", "array", FLAG, help="one line per array task"),
    Option("S", "sort", "sort", help="comma separated list of sort fields"),
    Option("s", "steps", "steps", FLAG, help="list running job steps instead of jobs"),
    Option("", "start", "start", FLAG, help="expected start times of pending jobs"),
    Option("t", "states", "states", help="comma separated list of states, or all"),
    Option("u", "user", "user", help="comma separated list of users or uids"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("w", "nodelist", "nodelist", help="only jobs on these nodes"),
    Option("", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def build_filter(opts: dict[str, Any], me: str) -> tuple[t.JobFilter, set[str] | None]:
    """The GetJobs filter, and the state set to show (None: all)."""
    flt: t.JobFilter = {}
    if opts.get("jobs"):
        flt.update(job_filter(opts["jobs"]))
    if opts.get("user"):
        flt["users"] = parse_users(opts["user"])
    if opts.get("me"):
        flt["users"] = [me]
    if opts.get("name"):
        flt["names"] = split_list(opts["name"])
    if opts.get("partition"):
        flt["partitions"] = split_list(opts["partition"])
    if opts.get("account"):
        flt["accounts"] = split_list(opts["account"])
    states: set[str] | None = set(ACTIVE_STATES)
    if opts.get("start"):
        states = {"PENDING"}
    if opts.get("states"):
        states = parse_states(opts["states"])
    if states is not None:
        flt["states"] = wire_states(states) or ["JOB_STATE_UNSPECIFIED"]
    return flt, states


def on_nodes(reply: t.GetJobsResponse, nodelist: str) -> t.GetJobsResponse:
    """Only the jobs that run on one of ``nodelist``'s nodes (``-w``)."""
    from corral import hostlist

    wanted_nodes = set(hostlist.expand(nodelist))
    jobs = [
        j
        for j in reply.get("jobs", [])
        if wanted_nodes & set(hostlist.expand(text(j, "nodelist") or ""))
    ]
    return {**reply, "jobs": jobs}


def format_steps(reply: Json, *, header: bool = True) -> str:
    """``squeue -s``: running steps, in Slurm's default step format
    (``%.15i %.8j %.9P %.8u %.9M %N``)."""
    now = float(reply.get("now") or 0)
    lines = [f"{'STEPID':>15} {'NAME':>8} {'PARTITION':>9} {'USER':>8} {'TIME':>9} NODELIST"]
    if not header:
        lines = []
    for job in reply.get("jobs", []):
        for step in job.get("steps", []):
            if step.get("state") != "JOB_STATE_RUNNING":
                continue
            ran = max(0.0, now - float(step.get("startTime") or now))
            lines.append(
                f"{str(job['jobId']) + '.' + str(step.get('stepId', 0)):>15} "
                f"{str(step.get('name', ''))[:8]:>8} {str(job.get('partition', ''))[:9]:>9} "
                f"{str(job.get('user', ''))[:8]:>8} {format_duration(ran):>9} "
                f"{step.get('nodelist', '')}"
            )
    return "".join(line + "\n" for line in lines)


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    flt, states = build_filter(opts, api.identity.user)
    try:
        reply = call(lambda: api.get_jobs({"filter": flt}), "slurm_load_jobs error")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    if opts.get("nodelist"):
        reply = on_nodes(reply, opts["nodelist"])
    if opts.get("steps"):
        sys.stdout.write(format_steps(reply, header=not opts.get("noheader")))
        return 0
    long = bool(opts.get("long"))
    fmt: str | list[Spec] = opts.get("format") or os.environ.get("SQUEUE_FORMAT") or ""
    if not opts.get("format") and (opts.get("long_format") or os.environ.get("SQUEUE_FORMAT2")):
        fmt = long_format(opts.get("long_format") or os.environ.get("SQUEUE_FORMAT2", ""))
    default = START_FORMAT if opts.get("start") else LONG_FORMAT if long else DEFAULT_FORMAT
    default_sort = "S" if opts.get("start") else DEFAULT_SORT
    sys.stdout.write(
        format_jobs(
            reply,
            fmt or default,
            header=not opts.get("noheader"),
            states=states,
            sort=opts.get("sort") or os.environ.get("SQUEUE_SORT") or default_sort,
            long_date=long,
            expand_arrays=bool(opts.get("array")),
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
