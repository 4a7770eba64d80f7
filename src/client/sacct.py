"""sacct: jobs from the durable store (QueryAccounting), in Slurm's fields and layouts.

Without -X each job that started gets its ``N.batch`` step line, as Slurm prints one
for every batch job. Output is a pure function of a QueryAccounting reply and its
``now`` (``format_accounting``); ``-P -n -o ...`` is what tools parse.
"""

from __future__ import annotations

import os
import sys
import time

from client.acctfields import SLURM_ACCT_FIELDS, acct_lines, parse_acct_fields
from client.common import client, run
from client.fieldmasks import chosen, sacct_fields
from client.fmt import (
    parse_job_ids,
    parse_states,
    parse_users,
    split_list,
    wire_states,
)
from client.options import COUNT, FLAG, LIST, Option, OptionParser, answered
from client.sacct_values import (
    cpu_time,
    job_row,
    srun_step_values,
    started,
    step_values,
    timelimit,
)
from client.views.job import Job
from corral.errors import InvalidOption
from corral.slurmfmt import format_timestamp, local_midnight, parse_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from corral.api import Controller
    from corral.wire import json_types as t

__all__ = ["OPTIONS", "build_request", "cpu_time", "field_spec", "format_accounting"]
__all__ += ["help_fields", "main", "parse_when", "timelimit", "window"]

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


def format_accounting(
    reply: t.QueryAccountingResponse,
    field_spec: str = DEFAULT_FIELDS,
    *,
    steps: bool = True,
    header: bool = True,
    parsable: str = "",
    delimiter: str = "|",
) -> str:
    """The whole output (with newlines) for a QueryAccounting reply."""
    fields = parse_acct_fields(field_spec)
    now = float(reply.get("now") or 0)
    rows: list[list[str]] = []
    names = [f.name for f in fields]
    for job in map(Job, reply.get("jobs", [])):
        rows.append(job_row(job, now, names))
        if not steps:
            continue
        values = [step_values(job, now)] if started(job) and not job.spec.allocation_only else []
        values.extend(srun_step_values(job, s, now) for s in job.steps)
        rows.extend([v.get(name, "") for name in names] for v in values)
    lines = acct_lines(fields, rows, header=header, parsable=parsable, delimiter=delimiter)
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------- time window

_RELATIVE = r"now([+-])(\d+)(seconds?|minutes?|hours?|days?|weeks?)?"
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE = r"(\d\d)[/.]?(\d\d)(?:[/.]?(\d\d))?(?:-(\d{1,2}):(\d\d)(?::(\d\d))?)?"


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
        return local_midnight(now)
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
        start = local_midnight(now)
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
    Option("B", "batch-script", "batch_script", FLAG, help="each job's batch script (-j)"),
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


# keep_matching's options and the fields they read
MATCHED = (("accounts", "account"), ("partition", "partition"), ("name", "spec.name"))


def keep_matching(
    reply: t.QueryAccountingResponse, opts: dict[str, Any]
) -> t.QueryAccountingResponse:
    """Filters the store does not apply: accounts, partitions, names."""
    tests: list[Callable[[Job], bool]] = []
    if opts.get("accounts"):
        accounts = set(split_list(opts["accounts"]))
        tests.append(lambda j: j.account in accounts)
    if opts.get("partition"):
        parts = set(split_list(opts["partition"]))
        tests.append(lambda j: j.partition in parts)
    if opts.get("name"):
        names = set(split_list(opts["name"]))
        tests.append(lambda j: j.spec.name in names)
    if not tests:
        return reply
    jobs = [j for j in reply.get("jobs", []) if all(t(Job(j)) for t in tests)]
    return {**reply, "jobs": jobs}


def with_array_tasks(
    api: Controller,
    request: t.QueryAccountingRequest,
    reply: t.QueryAccountingResponse,
    wanted: str,
) -> t.QueryAccountingResponse:
    """``-j 11`` of an array lists every task, ``-j 11_2`` that task only (Slurm's).

    Tasks have consecutive raw ids from the array's id, as many as ``--array`` names,
    so one more query over that range finds them all (the count ctld typed at submit)."""
    arrays: dict[int, int] = {}  # array id -> task count
    for job in map(Job, reply.get("jobs", [])):
        master = job.array_job_id
        if master and master == job.job_id and job.spec.array_task_count:
            arrays[master] = job.spec.array_task_count
    if not arrays:
        return reply
    ids = sorted({str(m + i) for m, n in arrays.items() for i in range(n)})
    extra = api.query_accounting(
        {**request, "filter": {**request.get("filter", {}), "jobIds": ids}}
    )
    by_id = {Job(j).job_id: Job(j) for j in [*reply.get("jobs", []), *extra.get("jobs", [])]}
    keep: list[t.Job] = []
    for item in split_list(wanted):
        base, _, task = item.split(".")[0].partition("_")
        if not base.isdigit():
            continue
        for job in sorted(by_id.values(), key=lambda j: j.job_id):
            whole = not task and int(base) in (job.job_id, job.array_job_id)
            one = (
                task.isdigit()
                and job.array_job_id == int(base)
                and job.is_array_task
                and job.array_task_id == int(task)
            )
            if (whole or one) and job.raw not in keep:
                keep.append(job.raw)
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
    if opts.get("batch_script"):
        if not opts.get("jobs"):
            raise InvalidOption("--batch-script requires --jobs (-j)")
        from client.batchscript import print_batch_scripts

        return print_batch_scripts(opts["jobs"])
    fields = field_spec(opts)
    names = [f.name for f in parse_acct_fields(fields)]  # a bad field fails before the call
    api = client()
    request = build_request(opts, api.identity.user, api.identity.uid, time.time())
    mask = chosen(
        sacct_fields(
            names,
            steps=not opts.get("allocations"),
            arrays=bool(opts.get("jobs")),
            matching=[w for k, w in MATCHED if opts.get(k)],
        )
    )
    if mask:
        request["fields"] = mask
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else ""
    # page by page, each printed as it comes: the columns have fixed widths, so the
    # first lines of a long history show at once and memory stays one page
    text = os.environ.get("CORRAL_SACCT_PAGE", "")  # not a positive number: the default
    fixed = int(text) if text.isdecimal() and int(text) > 0 else 0
    page_size = fixed or FIRST_PAGE  # a small first page: the first lines come quickly
    header = not opts.get("noheader")
    while True:
        request["limit"] = page_size
        reply = api.query_accounting(request)
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
        if len({Job(j).job_id for j in page}) < page_size:
            return 0
        sys.stdout.flush()
        request["afterJobId"] = str(Job(page[-1]).job_id)
        page_size = fixed or PAGE


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]), listing=True)


if __name__ == "__main__":
    main()
