"""squeue's columns: what each ``-o`` letter and ``-O`` field prints for a job, and the
``-S`` sort keys, each read from the job's typed view (``client.views``)."""

from __future__ import annotations

import sys

from client.common import JOB_STATE_CODES
from client.fmt import (
    Column,
    Spec,
    convert_mb,
    gpu_tres,
    group_name,
    limit_minutes,
    or_null,
    squeue_secs,
)
from client.views.job import Job
from client.views.spec import Spec as JobSpec
from corral.errors import InvalidOption
from corral.slurmfmt import format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from corral.wire import json_types as t

#: States whose NODELIST(REASON) column shows the reason, not the nodes.
REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "FAILED", "DEADLINE"})
ON_NODE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


class Row:
    """A job and the controller's clock: everything a column needs."""

    __slots__ = ("job", "now", "ref", "spec")

    def __init__(self, job: t.Job, now: float, ref: str = "") -> None:
        self.job = Job(job)
        self.now = now
        self.ref = ref or self.job.ref
        self.spec: JobSpec = self.job.spec


# ---------------------------------------------------------------- job values


def elapsed(job: Job, now: float) -> float:
    """Seconds the job has run (0 while pending), as squeue's TIME."""
    start = job.start_time
    if not start or job.state_name == "PENDING":
        return 0.0
    end = job.end_time
    if job.state_name in ON_NODE or not end:
        end = now
    return max(0.0, end - start)


def time_limit(job: t.Job) -> str:
    limit = Job(job).time_limit_s
    if limit < 0:
        return "UNLIMITED"
    return squeue_secs(limit_minutes(limit)) if limit else "NOT_SET"


def time_left(row: Row) -> str:
    limit = row.job.time_limit_s
    if limit < 0:
        return "UNLIMITED"
    if not limit:
        return "NOT_SET"
    return squeue_secs(limit - int(elapsed(row.job, row.now)))


def end_time(job: Job) -> str:
    """END_TIME: the expected end of a running job (NONE without a limit), else its end."""
    if job.state_name in ON_NODE:
        limit = job.time_limit_s
        if limit < 0:
            return "NONE"
        return format_timestamp(job.start_time + limit)
    return format_timestamp(job.end_time, unknown="N/A")


def start_time(job: Job) -> float:
    """When it started, or (pending) when the backfill pass expects it to."""
    if job.state_name == "PENDING":
        return job.expected_start
    return job.start_time


def reason(job: Job) -> str:
    return job.reason or "None"


def reason_or_nodes(job: Job) -> str:
    if job.state_name in REASON_STATES:
        return f"({reason(job)})"
    return job.nodelist


def tres_per_node(spec: JobSpec) -> str:
    gpus = spec.gpus_per_node
    if spec.shards_per_node:
        return f"gres:shard:{spec.shards_per_node}"
    return gpu_tres(gpus, spec.gpu_type) if gpus else "N/A"


def min_memory(spec: JobSpec) -> str:
    return convert_mb(spec.mem_per_node_mb or spec.mem_per_cpu_mb)


def min_cpus(spec: JobSpec) -> str:
    return str(max(1, spec.cpus_per_task) * max(1, spec.ntasks_per_node))


def priority_share(job: Job) -> str:
    """%p: the priority as a fraction of the largest one (Slurm's 14 decimals)."""
    return f"{job.priority / 0xFFFFFFFF:16.14f}"


def _col(header: str, value: Callable[[Row], str], **kw: bool) -> Column:
    return Column(header, value, **kw)


def _const(value: str) -> Callable[[Row], str]:
    return lambda r: value


COLUMNS: dict[str, Column] = {
    "a": _col("ACCOUNT", lambda r: or_null(r.job.account)),
    "A": _col("JOBID", lambda r: str(r.job.job_id)),
    "b": _col("TRES_PER_NODE", lambda r: tres_per_node(r.spec)),
    "B": _col("EXEC_HOST", lambda r: r.job.batch_host or "n/a"),
    "c": _col("MIN_CPUS", lambda r: min_cpus(r.spec)),
    "C": _col("CPUS", lambda r: str(r.job.num_cpus)),
    "d": _col("MIN_TMP_DISK", _const("0")),
    "D": _col("NODES", lambda r: str(r.job.num_nodes)),
    "e": _col("END_TIME", lambda r: end_time(r.job)),
    "E": _col("DEPENDENCY", lambda r: or_null(r.spec.dependency)),
    "f": _col("FEATURES", lambda r: or_null(r.spec.constraint)),
    "F": _col("ARRAY_JOB_ID", lambda r: str(r.job.array_job_id or r.job.job_id)),
    "g": _col("GROUP", lambda r: group_name(r.job.gid)),
    "G": _col("GROUP", lambda r: str(r.job.gid)),
    "h": _col("OVER_SUBSCRIBE", lambda r: "NO" if r.spec.exclusive else "OK"),
    "H": _col("SOCKETS_PER_NODE", _const("*")),
    "i": _col("JOBID", lambda r: r.ref, cut=False),
    "I": _col("CORES_PER_SOCKET", _const("*")),
    "j": _col("NAME", lambda r: r.spec.name),
    "J": _col("THREADS_PER_CORE", _const("*")),
    "k": _col("COMMENT", lambda r: or_null(r.spec.comment)),
    "K": _col("ARRAY_TASK_ID", lambda r: r.ref.partition("_")[2] or "N/A"),
    "l": _col("TIME_LIMIT", lambda r: time_limit(r.job.raw), cut=False),
    "L": _col("TIME_LEFT", time_left, cut=False),
    "m": _col("MIN_MEMORY", lambda r: min_memory(r.spec)),
    "M": _col("TIME", lambda r: squeue_secs(elapsed(r.job, r.now)), cut=False),
    "n": _col("REQ_NODES", lambda r: r.spec.nodelist),
    "N": _col("NODELIST", lambda r: r.job.nodelist, cut=False, header_cut=False),
    "o": _col("COMMAND", lambda r: r.spec.command or "(null)"),
    "O": _col("CONTIGUOUS", _const("0")),
    "p": _col("PRIORITY", lambda r: priority_share(r.job)),
    "P": _col("PARTITION", lambda r: r.job.partition),
    "q": _col("QOS", lambda r: or_null(r.job.qos or r.spec.qos)),
    "Q": _col("PRIORITY", lambda r: str(r.job.priority)),
    "r": _col("REASON", lambda r: reason(r.job)),
    "R": _col("NODELIST(REASON)", lambda r: reason_or_nodes(r.job), header_cut=False),
    "S": _col("START_TIME", lambda r: format_timestamp(start_time(r.job), unknown="N/A")),
    "t": _col("ST", lambda r: JOB_STATE_CODES.get(r.job.state_name, "?")),
    "T": _col("STATE", lambda r: r.job.state_name),
    "u": _col("USER", lambda r: r.job.user),
    "U": _col("UID", lambda r: str(r.job.uid)),
    "v": _col("RESERVATION", lambda r: or_null(r.spec.reservation)),
    "V": _col("SUBMIT_TIME", lambda r: format_timestamp(r.job.submit_time, unknown="N/A")),
    "w": _col("WCKEY", lambda r: or_null(r.spec.wckey)),
    "W": _col("LICENSES", _const("(null)")),
    "x": _col("EXC_NODES", lambda r: r.spec.exclude),
    "X": _col("CORE_SPEC", _const("N/A")),
    "y": _col("NICE", lambda r: str(r.spec.nice)),
    "Y": _col("SCHEDNODES", lambda r: or_null(r.job.forecast_nodes)),
    "z": _col("S:C:T", _const("*:*:*")),
    "Z": _col("WORK_DIR", lambda r: r.spec.work_dir),
}


# ---------------------------------------------------------------- sorting


def sort_keys() -> dict[str, Callable[[Row], Any]]:
    return {
        "C": lambda r: r.job.num_cpus,
        "D": lambda r: r.job.num_nodes,
        "e": lambda r: r.job.end_time,
        "i": lambda r: r.job.job_id,
        "j": lambda r: r.spec.name,
        "l": lambda r: r.job.time_limit_s,
        "M": lambda r: elapsed(r.job, r.now),
        "N": lambda r: r.job.nodelist,
        "p": lambda r: r.job.priority,
        "P": lambda r: r.job.partition,
        "Q": lambda r: r.job.priority,
        "S": lambda r: start_time(r.job),
        "t": lambda r: JOB_STATE_CODES.get(r.job.state_name, ""),
        "T": lambda r: r.job.state_name,
        "u": lambda r: r.job.user,
        "U": lambda r: r.job.uid,
        "V": lambda r: r.job.submit_time,
    }


def sort_rows(rows: list[Row], order: str) -> list[Row]:
    """Sort as ``-S`` says: field letters (commas optional), ``-`` before one for
    descending, the first the most significant; stable sorts from the last key to the
    first, as Slurm."""
    keys = sort_keys()
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


def _gpus_or_na(count: int, spec: JobSpec) -> str:
    return gpu_tres(count, spec.gpu_type) if count else "N/A"


def _std_path(row: Row, which: int) -> str:
    from client.scontrol_show import std_paths  # only for these fields: squeue stays light

    return std_paths(row.job)[which]


def _tres_alloc(row: Row) -> str:
    from client.scontrol_show import job_tres

    return job_tres(row.job)


def _pending_time(row: Row) -> str:
    """Seconds from submission to start (or to now while pending), as Slurm counts."""
    start = row.job.start_time if row.job.state_name != "PENDING" else 0.0
    return str(max(0, int((start or row.now) - row.job.submit_time)))


def _exit_status(job: Job) -> str:
    """EXIT_CODE: the raw wait status, as Slurm's squeue prints it (exit 3 is 768)."""
    return str((job.exit_code & 0xFF) << 8 | job.exit_signal & 0x7F)


# -O fields with no -o letter, under Slurm's headers
LONG_COLUMNS: dict[str, Column] = {
    "accruetime": _col(
        "ACCRUE_TIME", lambda r: format_timestamp(r.job.eligible_time, unknown="N/A")
    ),
    "admincomment": _col("ADMIN_COMMENT", _const("(null)")),
    "allocnodes": _col("ALLOC_NODES", lambda r: r.spec.submit_host),
    "batchflag": _col("BATCH_FLAG", lambda r: "0" if r.spec.allocation_only else "1"),
    "boardspernode": _col("BOARDS_PER_NODE", _const("0")),
    "burstbuffer": _col("BURST_BUFFER", _const("(null)")),
    "cluster": _col("CLUSTER", lambda r: r.job.cluster),
    "cpuspertask": _col("CPUS_PER_TASK", lambda r: str(max(1, r.spec.cpus_per_task))),
    "cpuspertres": _col("CPUS_PER_TRES", _const("N/A")),
    "deadline": _col("DEADLINE", _const("N/A")),
    "derivedec": _col("DERIVED_EC", _const("0")),
    "eligibletime": _col(
        "ELIGIBLE_TIME", lambda r: format_timestamp(r.job.eligible_time, unknown="N/A")
    ),
    "exitcode": _col("EXIT_CODE", lambda r: _exit_status(r.job)),
    "maxcpus": _col("MAX_CPUS", lambda r: str(r.job.num_cpus)),
    "maxnodes": _col(
        "MAX_NODES", lambda r: str(r.spec.nodes_max or r.spec.nodes_min or r.job.num_nodes)
    ),
    "mempertres": _col("MEM_PER_TRES", _const("N/A")),
    "mintime": _col("TIME_MIN", _const("0:00")),
    "network": _col("NETWORK", _const("(null)")),
    "ntperboard": _col("NTASKS_PER_BOARD", _const("0")),
    "ntpercore": _col("NTASKS_PER_CORE", _const("N/A")),
    "ntpernode": _col("NTASKS_PER_NODE", lambda r: str(r.spec.ntasks_per_node)),
    "ntpersocket": _col("NTASKS_PER_SOCKET", _const("N/A")),
    "numtasks": _col("TASKS", lambda r: str(r.job.num_tasks or r.spec.ntasks or 1)),
    "pendingtime": _col("PENDING_TIME", _pending_time),
    "preempttime": _col("PREEMPT_TIME", _const("N/A")),
    "profile": _col("PROFILE", _const("NotSet")),
    "reboot": _col("REBOOT", _const("0")),
    "reqswitch": _col("REQ_SWITCH", _const("0")),
    "requeue": _col("REQUEUE", lambda r: "0" if r.spec.no_requeue else "1"),
    "resizetime": _col("RESIZE_TIME", _const("N/A")),
    "restartcnt": _col("RESTART_COUNT", lambda r: str(r.job.restart_count)),
    "sperboard": _col("SOCKETS_PER_BOARD", _const("0")),
    "stderr": _col("STDERR", lambda r: _std_path(r, 0)),
    "stdin": _col("STDIN", lambda r: _std_path(r, 1)),
    "stdout": _col("STDOUT", lambda r: _std_path(r, 2)),
    "systemcomment": _col("SYSTEM_COMMENT", _const("(null)")),
    "tresalloc": _col("TRES_ALLOC", _tres_alloc),
    "tresbind": _col("TRES_BIND", _const("N/A")),
    "tresfreq": _col("TRES_FREQ", _const("N/A")),
    "tresperjob": _col("TRES_PER_JOB", lambda r: _gpus_or_na(r.spec.gpus, r.spec)),
    "trespersocket": _col("TRES_PER_SOCKET", _const("N/A")),
    "trespertask": _col("TRES_PER_TASK", lambda r: _gpus_or_na(r.spec.gpus_per_task, r.spec)),
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
