"""squeue: the jobs ctld holds, in Slurm's columns (``-o`` formats, filters, sorting).

Output is a pure function of a GetJobs response and its ``now`` (``format_jobs``), so
what scripts parse (``squeue -h -o "%i %t"``) is tested byte for byte without a cluster.
"""

from __future__ import annotations

import os
import sys

from client.common import client, run
from client.fieldmasks import SQUEUE_STEPS, chosen, squeue_fields
from client.fmt import (
    Reported,
    Spec,
    all_letters,
    call,
    check_format,
    ctime,
    job_filter,
    parse_format,
    parse_states,
    parse_users,
    render,
    render_rows,
    split_list,
    wire_states,
)
from client.options import COUNT, FLAG, Option, OptionParser, parse_command
from client.squeue_columns import COLUMNS, LONG_COLUMNS, Row, long_format, sort_rows, time_limit
from client.views.job import Job
from corral.errors import InvalidOption
from corral.slurmfmt import format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any

    from corral.api import Controller
    from corral.wire import json_types as t

__all__ = ["ACTIVE_STATES", "Row", "build_filter", "format_jobs", "long_format", "main"]
__all__ += ["sort_rows", "time_limit"]

PROG = "squeue"
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %.20Y %R"  # squeue --start
PAGE = 5000  # jobs per GetJobs call
DEFAULT_SORT = "P,t,-p"  # partition, state, priority (highest first)
#: What squeue lists when no -t is given, as Slurm.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT"})


# ---------------------------------------------------------------- output


def collapse_arrays(rows: list[Row]) -> list[Row]:
    """An array's pending tasks with the same reason as one row, ``120_[3-9,12]``, as
    squeue shows them unless -r; running and finished tasks keep their own rows."""
    groups: dict[tuple[int, str], list[Row]] = {}
    out: list[Row] = []
    for row in rows:
        job = row.job
        if job.is_array_task and job.state_name == "PENDING":
            key = (job.array_job_id, job.reason)
            if key not in groups:
                groups[key] = []
                out.append(row)  # placeholder, replaced below
            groups[key].append(row)
        else:
            out.append(row)
    for (array_id, _), members in groups.items():
        if len(members) == 1:
            continue
        tasks = sorted(m.job.array_task_id for m in members)
        first = members[0]
        merged = Row(first.job.raw, first.now, f"{array_id}_[{_ranges(tasks)}]")
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


def wanted(job: t.Job, states: Collection[str] | None) -> bool:
    """The state filter: -t's states, everything for ``all``, else the active ones."""
    if states is None:
        return True
    return Job(job).state_name in states


def format_jobs(
    reply: t.GetJobsResponse,
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
    now = float(reply.get("now") or 0)
    rows = [Row(j, now) for j in reply.get("jobs", []) if wanted(j, states)]
    if not expand_arrays:
        rows = collapse_arrays(rows)
    rows = sort_rows(rows, sort)
    lines = [ctime(now)] if long_date and header else []
    if header:
        lines.append(render(prefix, specs, columns, None))
    lines.extend(render_rows(prefix, specs, columns, rows))
    return "".join(line + "\n" for line in lines)


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
        j for j in reply.get("jobs", []) if wanted_nodes & set(hostlist.expand(Job(j).nodelist))
    ]
    return {**reply, "jobs": jobs}


def format_steps(reply: t.GetJobsResponse, *, header: bool = True) -> str:
    """``squeue -s``: running steps, in Slurm's default step format
    (``%.15i %.8j %.9P %.8u %.9M %N``)."""
    now = float(reply.get("now") or 0)
    lines = [f"{'STEPID':>15} {'NAME':>8} {'PARTITION':>9} {'USER':>8} {'TIME':>9} NODELIST"]
    if not header:
        lines = []
    for job in map(Job, reply.get("jobs", [])):
        for step in job.steps:
            if step.state != "JOB_STATE_RUNNING":
                continue
            ran = max(0.0, now - (step.start_time or now))
            lines.append(
                f"{str(job.job_id) + '.' + str(step.step_id):>15} "
                f"{step.name[:8]:>8} {job.partition[:9]:>9} "
                f"{job.user[:8]:>8} {format_duration(ran):>9} {step.nodelist}"
            )
    return "".join(line + "\n" for line in lines)


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    flt, states = build_filter(opts, api.identity.user)
    long = bool(opts.get("long"))
    fmt: str | list[Spec] = opts.get("format") or os.environ.get("SQUEUE_FORMAT") or ""
    if not opts.get("format") and (opts.get("long_format") or os.environ.get("SQUEUE_FORMAT2")):
        fmt = long_format(opts.get("long_format") or os.environ.get("SQUEUE_FORMAT2", ""))
    default = START_FORMAT if opts.get("start") else LONG_FORMAT if long else DEFAULT_FORMAT
    fmt = fmt or default
    default_sort = "S" if opts.get("start") else DEFAULT_SORT
    sort = opts.get("sort") or os.environ.get("SQUEUE_SORT") or default_sort
    request: t.GetJobsRequest = {"filter": flt}
    fields = chosen(
        list(SQUEUE_STEPS)
        if opts.get("steps")
        else squeue_fields(format_keys(fmt), sort, nodelist=bool(opts.get("nodelist")))
    )
    if fields:
        request["fields"] = fields
    try:
        reply = call(lambda: fetch_pages(api, request), "slurm_load_jobs error")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    if opts.get("nodelist"):
        reply = on_nodes(reply, opts["nodelist"])
    if opts.get("steps"):
        sys.stdout.write(format_steps(reply, header=not opts.get("noheader")))
        return 0
    sys.stdout.write(
        format_jobs(
            reply,
            fmt,
            header=not opts.get("noheader"),
            states=states,
            sort=sort,
            long_date=long,
            expand_arrays=bool(opts.get("array")),
        )
    )
    return 0


def fetch_pages(api: Controller, request: t.GetJobsRequest) -> t.GetJobsResponse:
    """Every job, ``PAGE`` a call (``CORRAL_SQUEUE_PAGE`` overrides), so ctld answers
    each call in bounded time at any depth; the rows are sorted once all are in (as
    Slurm's squeue sorts them), so nothing prints before the last page."""
    text = os.environ.get("CORRAL_SQUEUE_PAGE", "")
    page = int(text) if text.isdecimal() and int(text) > 0 else PAGE
    request["limit"] = page
    reply = api.get_jobs(request)
    last = list(reply.get("jobs", []))
    jobs, after = list(last), 0
    while len(last) >= page and Job(last[-1]).job_id > after:  # each page further on
        after = Job(last[-1]).job_id
        request["afterJobId"] = str(after)
        last = list(api.get_jobs(request).get("jobs", []))
        jobs.extend(last)
    return {**reply, "jobs": jobs}


def format_keys(fmt: str | list[Spec]) -> list[str]:
    """The column keys ``fmt`` prints (its field mask's), none for a format that does
    not parse (format_jobs reports it, after the call as before)."""
    if isinstance(fmt, list):
        return [s.letter for s in fmt]
    try:
        text = all_letters(COLUMNS) if fmt.lower() == "%all" else fmt
        return [s.letter for s in parse_format(text)[1]]
    except InvalidOption:
        return ["?"]  # no such column: no mask


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]), listing=True)


if __name__ == "__main__":
    main()
