"""The field masks the query commands send (``fields``; docs/architecture.md, "Field
masks"): for each column a format can print, the wire fields its value reads.

One table per command, keyed as the command's own column table is (squeue's ``-o``
letters and ``-O`` names, sacct's field names, sinfo's letters), each entry the proto
names of the fields the column's value reads through the views (``client.views``:
a view's property is its field's name; ``spec.X`` a field of the job's spec). The
command sends the union over what it prints, sorts and filters on, plus what every row
needs (its id, its state). A column missing from its table, or mapped to ``None``
(its value reads too much to list), sends no mask: every field, as before, never a
column printed short of a field. tests/unit/test_fieldmasks.py checks each entry
against a job with every field set.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

NO_MASK_ENV = "CORRAL_NO_FIELD_MASK"

Fields = tuple[str, ...] | None  # None: needs every field (no mask)

_LIMITS = ("state", "time_limit_s", "start_time", "end_time")
_RAN = ("state", "start_time", "end_time")

# ---------------------------------------------------------------- squeue

#: what each squeue row needs whatever it prints: its name (``120_3``), the state
#: filter, and the pending array tasks' collapse (array id and reason)
SQUEUE_ROW = ("job_id", "array_job_id", "array_task_id", "state", "reason")

SQUEUE: dict[str, Fields] = {
    "a": ("account",),
    "A": ("job_id",),
    "b": ("spec.gpus_per_node", "spec.shards_per_node", "spec.gpu_type"),
    "B": ("batch_host",),
    "c": ("spec.cpus_per_task", "spec.ntasks_per_node"),
    "C": ("num_cpus",),
    "d": (),
    "D": ("num_nodes",),
    "e": _LIMITS,
    "E": ("spec.dependency",),
    "f": ("spec.constraint",),
    "F": ("array_job_id", "job_id"),
    "g": ("gid",),
    "G": ("gid",),
    "h": ("spec.exclusive",),
    "H": (),
    "i": (),
    "I": (),
    "j": ("spec.name",),
    "J": (),
    "k": ("spec.comment",),
    "K": (),
    "l": ("time_limit_s",),
    "L": _LIMITS,
    "m": ("spec.mem_per_node_mb", "spec.mem_per_cpu_mb"),
    "M": _RAN,
    "n": ("spec.nodelist",),
    "N": ("nodelist",),
    "o": ("spec.command",),
    "O": (),
    "p": ("priority",),
    "P": ("partition",),
    "q": ("qos", "spec.qos"),
    "Q": ("priority",),
    "r": ("reason",),
    "R": ("state", "reason", "nodelist"),
    "S": ("state", "expected_start", "start_time"),
    "t": ("state",),
    "T": ("state",),
    "u": ("user",),
    "U": ("uid",),
    "v": ("spec.reservation",),
    "V": ("submit_time",),
    "w": ("spec.wckey",),
    "W": (),
    "x": ("spec.exclude",),
    "X": (),
    "y": ("spec.nice",),
    "Y": ("forecast_nodes",),
    "z": (),
    "Z": ("spec.work_dir",),
    # -O fields without a letter
    "accruetime": ("eligible_time",),
    "admincomment": (),
    "allocnodes": ("spec.submit_host",),
    "batchflag": ("spec.allocation_only",),
    "boardspernode": (),
    "burstbuffer": (),
    "cluster": ("cluster",),
    "cpuspertask": ("spec.cpus_per_task",),
    "cpuspertres": (),
    "deadline": (),
    "derivedec": (),
    "eligibletime": ("eligible_time",),
    "exitcode": ("exit_code", "exit_signal"),
    "maxcpus": ("num_cpus",),
    "maxnodes": ("spec.nodes_max", "spec.nodes_min", "num_nodes"),
    "mempertres": (),
    "mintime": (),
    "network": (),
    "ntperboard": (),
    "ntpercore": (),
    "ntpernode": ("spec.ntasks_per_node",),
    "ntpersocket": (),
    "numtasks": ("num_tasks", "spec.ntasks"),
    "pendingtime": ("state", "start_time", "submit_time"),
    "preempttime": (),
    "profile": (),
    "reboot": (),
    "reqswitch": (),
    "requeue": ("spec.no_requeue",),
    "resizetime": (),
    "restartcnt": ("restart_count",),
    "sperboard": (),
    "stderr": None,  # paths expanded from the spec's patterns (%j, %u, %x, ...)
    "stdin": None,
    "stdout": None,
    "systemcomment": (),
    "tresalloc": ("num_cpus", "mem_mb", "num_nodes", "num_gpus"),
    "tresbind": (),
    "tresfreq": (),
    "tresperjob": ("spec.gpus", "spec.gpu_type"),
    "trespersocket": (),
    "trespertask": ("spec.gpus_per_task", "spec.gpu_type"),
    "wait4switch": (),
}

#: squeue -s: the running steps of each job
SQUEUE_STEPS = ("job_id", "partition", "user", "steps")


def squeue_fields(keys: Iterable[str], sort: str, *, nodelist: bool = False) -> list[str] | None:
    """The mask for squeue's columns ``keys`` (letters, -O names) and ``-S`` ``sort``
    (its letters read what their columns read); ``nodelist`` for ``-w``."""
    wanted = [*keys, *(ch for ch in sort if ch not in ",+- ")]
    extra = ("nodelist",) if nodelist else ()
    return union(SQUEUE, wanted, (*SQUEUE_ROW, *extra))


# ---------------------------------------------------------------- sacct

_BATCH_ALLOC = ("allocations", "batch_host", "num_cpus", "mem_mb", "num_gpus")
_TRES = ("num_cpus", "mem_mb", "num_gpus", "num_nodes")
_ETTR = ("interruptions", "first_start_time", "end_time")

#: what each sacct row needs: its name, whether it started (its N.batch line)
SACCT_ROW = ("job_id", "array_job_id", "array_task_id", "state", "start_time")
#: and without -X: whether it has a batch step, and its srun steps (each step line
#: reads the step and its job's name, account, cluster, partition and user: below)
SACCT_STEPS = ("spec.allocation_only", "steps")

#: the job's own line (client/sacct_values.py ``JOB_VALUES``)
SACCT_JOB: dict[str, Fields] = {
    "Account": ("account",),
    "AllocCPUS": ("num_cpus",),
    "AllocTRES": _TRES,
    "Cluster": ("cluster",),
    "Comment": ("spec.comment",),
    "Constraints": ("spec.constraint",),
    "CPUTime": ("end_time", "num_cpus"),
    "CPUTimeRAW": ("end_time", "num_cpus"),
    "DerivedExitCode": ("steps",),
    "Elapsed": ("end_time",),
    "ElapsedRaw": ("end_time",),
    "Eligible": ("eligible_time",),
    "End": ("end_time",),
    "ExitCode": ("exit_code", "exit_signal"),
    "GID": ("gid",),
    "Group": ("gid",),
    "JobID": (),
    "JobIDRaw": (),
    "JobName": ("spec.name",),
    "NCPUS": ("num_cpus",),
    "NNodes": ("num_nodes",),
    "NodeList": ("nodelist",),
    "Partition": ("partition",),
    "Priority": ("priority",),
    "QOS": ("qos", "spec.qos"),
    "Reason": ("reason",),
    "Restarts": ("restart_count",),
    "ReqCPUS": ("num_cpus",),
    "ReqMem": ("spec.mem_per_node_mb", "spec.mem_per_cpu_mb"),
    "ReqNodes": ("num_nodes",),
    "ReqTRES": _TRES,
    "Start": (),
    "State": ("cancelled_by_uid", "uid"),
    "Submit": ("submit_time",),
    "SubmitLine": ("spec.submit_line",),
    "Suspended": (),
    "Timelimit": ("time_limit_s",),
    "TimelimitRaw": ("time_limit_s",),
    "UID": ("uid",),
    "User": ("user",),
    "WCKey": ("spec.wckey",),
    "WorkDir": ("spec.work_dir",),
    "TotalCPU": ("usage",),
    "UserCPU": ("usage",),
    "SystemCPU": ("usage",),
    "Interruptions": _ETTR,
    "InterruptCauses": ("interruptions",),
    "RestartOverhead": _ETTR,
    "LostTime": _ETTR,
    "ETTR": _ETTR,
}

#: more for the job's N.batch line (``step_values``, ``usage_values``); a field in
#: neither table prints empty on every line (Slurm's that corral does not keep)
SACCT_BATCH: dict[str, Fields] = {
    "AllocCPUS": _BATCH_ALLOC,
    "AllocTRES": _BATCH_ALLOC,
    "CPUTime": _BATCH_ALLOC,
    "CPUTimeRAW": _BATCH_ALLOC,
    "NCPUS": _BATCH_ALLOC,
    "NodeList": ("batch_host",),
    "NTasks": (),
    "MaxRSS": ("usage",),
    "AveRSS": ("usage",),
    "MaxRSSNode": ("usage", "batch_host"),
    "MaxRSSTask": ("usage",),
    "TRESUsageInMax": ("usage", "allocations"),
    "TRESUsageInAve": ("usage", "allocations"),
    "TRESUsageInTot": ("usage", "allocations"),
}


def sacct_fields(
    names: Iterable[str], *, steps: bool, arrays: bool, matching: Iterable[str] = ()
) -> list[str] | None:
    """The mask for sacct's field ``names``: with the step lines (``steps``), the
    array tasks' expansion of ``-j`` (``arrays``) and the client-side filters'
    fields (``matching``). A field no line prints a value for needs nothing."""
    job_line, step_lines = _printed()
    out = set(SACCT_ROW) | set(matching)
    if steps:
        out.update(SACCT_STEPS)
    if arrays:
        out.add("spec.array_tasks")
    for name in names:
        on_job = name in job_line
        on_steps = steps and name in step_lines
        if (on_job and name not in SACCT_JOB) or (
            on_steps and name not in SACCT_JOB and name not in SACCT_BATCH
        ):
            return None  # printed, but not in the tables: every field
        if on_job or on_steps:
            out.update(SACCT_JOB.get(name) or ())
        if on_steps:
            out.update(SACCT_BATCH.get(name) or ())
    return sorted(out)


def _printed() -> tuple[frozenset[str], frozenset[str]]:
    """The fields the job's line prints a value for, and those its step lines do:
    the keys of the value functions themselves, so a field added there and not to the
    tables above sends no mask."""
    from client.sacct_values import JOB_VALUES, srun_step_values, step_values
    from client.views.job import Job
    from client.views.step import Step

    job = Job({"usage": {"maxRssKb": "1"}})  # with usage: its fields are on the line
    steps = {*step_values(job, 0.0), *srun_step_values(job, Step({}), 0.0)}
    return frozenset(JOB_VALUES), frozenset(steps)


# ---------------------------------------------------------------- sinfo

_RES = ("resources",)
_STATE_WORD = (
    "state",
    "reservation",
    "spare",
    "maint",
    "not_responding",
    "power",
    "power_down_pending",
)

#: what each sinfo line needs: the node's name (partition membership, NODELIST), its
#: state (the order of lines, -t, -R) and its power state and cloud flag (-t)
SINFO_ROW = ("name", "state", "power", "power_down_pending", "cloud")

SINFO: dict[str, Fields] = {
    "b": _RES,
    "c": _RES,
    "C": ("resources", "alloc_cpus", "state"),
    "d": (),
    "D": (),
    "e": (),
    "E": ("reason",),
    "f": _RES,
    "F": ("state",),
    "G": ("resources", "gpu_type", "shards_per_gpu"),
    "H": ("reason_time",),
    "m": _RES,
    "n": (),
    "N": (),
    "o": ("address",),
    "O": (),
    "t": _STATE_WORD,
    "T": _STATE_WORD,
    "u": ("reason", "reason_user", "reason_uid"),
    "U": ("reason", "reason_user", "reason_uid"),
    "v": ("version",),
    "w": (),
    "X": _RES,
    "Y": _RES,
    "Z": _RES,
    "z": _RES,
    # the partition's own (from GetPartitions): nothing of the node
    **dict.fromkeys("aBghlLpPrRsSV", ()),
}


def sinfo_fields(letters: Iterable[str]) -> list[str] | None:
    return union(SINFO, letters, SINFO_ROW)


# ---------------------------------------------------------------- shared


def union(
    table: Mapping[str, Fields], keys: Iterable[str], base: Iterable[str]
) -> list[str] | None:
    """The sorted union of ``base`` and each key's fields; None (no mask) as soon as a
    key is not in ``table`` or needs every field."""
    out = set(base)
    for key in keys:
        fields = table.get(key)
        if fields is None:
            return None
        out.update(fields)
    return sorted(out)


def chosen(fields: list[str] | None) -> list[str] | None:
    """``fields``, unless ``CORRAL_NO_FIELD_MASK=1`` says to send no mask (to compare,
    or to work around a table found short)."""
    return None if os.environ.get(NO_MASK_ENV) else fields
