"""The queue (squeue's jobs, with each pending job's reason in words, what it waits for
and its forecast start), and a user's own jobs (the same, plus their finished ones)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlencode

from corral.reasons import reason_words
from corral.wire import corral_pb2 as pb
from ctld.web.html import Html, el
from ctld.web.page import Ctx, badge, elapsed, job_link, job_state, pager, table, when

PER_PAGE = 100
ACTIVE = (pb.JOB_STATE_PENDING, pb.JOB_STATE_RUNNING, pb.JOB_STATE_COMPLETING)
HISTORY_S = 7 * 86400  # "my jobs" shows the finished ones of this long from the store
SORTS: dict[str, Callable[[pb.Job], object]] = {
    "id": lambda j: j.job_id,
    "priority": lambda j: j.priority,
    "submit": lambda j: j.submit_time,
    "start": lambda j: j.start_time or j.expected_start or float("inf"),
    "user": lambda j: (j.user, j.job_id),
    "state": lambda j: (j.state, j.job_id),
    "name": lambda j: (j.spec.name, j.job_id),
}


def _why(job: pb.Job, ctx: Ctx) -> Html:
    if job.state == pb.JOB_STATE_PENDING:
        parts: list[object] = [el("span", reason_words(job.reason), class_="words")]
        if job.reason:
            parts.append(el("span", f" [{job.reason}]", class_="muted"))
        if job.waits_for:
            parts.append(el("br"))
            parts.append("waits for ")
            parts.append([[job_link(i), " "] for i in job.waits_for[:5]])
        if job.expected_start:
            parts.append(el("br"))
            parts.append(f"expected start {when(job.expected_start, ctx.now)}")
        return el("span", *parts)
    if job.state in ACTIVE:
        return el("span", job.nodelist)
    return el("span", job.reason or f"exit {job.exit_code}:{job.exit_signal}")


def _filters(ctx: Ctx, mine: bool) -> Html:
    fields = []
    states = [("", "active"), ("PENDING", "pending"), ("RUNNING", "running"), ("ALL", "all")]
    chosen = ctx.arg("state").upper()
    fields.append(
        el(
            "label",
            "state",
            el(
                "select",
                [el("option", t, value=v, selected=v == chosen) for v, t in states],
                name="state",
            ),
        )
    )
    for name in (() if mine else ("user",)) + ("account", "partition", "name"):
        fields.append(el("label", name, el("input", type="search", name=name, value=ctx.arg(name))))
    if ctx.arg("sort"):
        fields.append(el("input", type="hidden", name="sort", value=ctx.arg("sort")))
    fields.append(el("button", "Filter", type="submit"))
    return el("form", *fields, method="get", action=ctx.path, class_="filters")


def _sort_link(ctx: Ctx, key: str, label: str) -> Html:
    current = ctx.arg("sort", "priority" if ctx.path == "/queue" else "-id")
    new = f"-{key}" if current == key else key
    q = {k: v for k, v in ctx.query.items() if k not in ("sort", "page")}
    q["sort"] = new
    arrow = " ▲" if current == key else " ▼" if current == f"-{key}" else ""
    return el("a", label + arrow, href=f"{ctx.path}?{urlencode(q)}")


def select_jobs(ctx: Ctx, jobs: list[pb.Job], mine: bool) -> list[pb.Job]:
    state = ctx.arg("state").upper()
    wanted: tuple[int, ...] | None = ACTIVE
    if state == "ALL":
        wanted = None
    elif state in ("PENDING", "RUNNING"):
        wanted = (pb.JobState.Value(f"JOB_STATE_{state}"),)
    user = ctx.who.user if mine else ctx.arg("user")
    account, part, name = ctx.arg("account"), ctx.arg("partition"), ctx.arg("name")
    # who may see which job was decided where they were read (ControllerApi.visible_jobs,
    # GetJobs's own selection; sacct's query for the finished ones)
    out = [
        j
        for j in jobs
        if (wanted is None or j.state in wanted)
        and (not user or j.user == user)
        and (not account or j.account == account)
        and (not part or j.partition == part)
        and (not name or name in j.spec.name)
    ]
    sort = ctx.arg("sort", "-priority" if not mine else "-id")
    key = SORTS.get(sort.lstrip("-"), SORTS["id"])
    # the queue's default: highest priority first, as the scheduler takes them
    out.sort(key=key, reverse=sort.startswith("-"))  # type: ignore[arg-type]
    return out


def _rows(ctx: Ctx, jobs: list[pb.Job]) -> list[list[object]]:
    """One page's rows, each job as GetJobs would show it to this viewer."""
    jobs = [ctx.policy.shown(ctx.who, j) for j in jobs]
    return [
        [
            job_link(j.job_id),
            j.spec.name,
            j.user,
            j.account,
            j.partition,
            badge(job_state(j.state)),
            elapsed(j, ctx.now),
            str(j.priority) if j.state == pb.JOB_STATE_PENDING else "",
            f"{j.num_nodes}N {j.num_gpus}G" if j.num_gpus else f"{j.num_nodes}N {j.num_cpus}C",
            _why(j, ctx),
        ]
        for j in jobs
    ]


async def _finished(ctx: Ctx) -> list[pb.Job]:
    """The user's jobs of the last week from the store (sacct's own query)."""
    req = pb.QueryAccountingRequest(
        filter=pb.JobFilter(users=[ctx.who.user]), start_after=ctx.now - HISTORY_S, limit=500
    )
    reply = await ctx.api.query_accounting(req, ctx.who)
    return list(reply.jobs)


async def render(ctx: Ctx, *, mine: bool = False) -> tuple[str, Html]:
    # the live jobs through the API's own selection (same authorization as squeue)
    jobs = ctx.reads.visible_jobs(pb.JobFilter(users=[ctx.who.user] if mine else []), ctx.who)
    if mine and ctx.arg("state").upper() == "ALL":
        seen = {j.job_id for j in jobs}
        jobs += [j for j in await _finished(ctx) if j.job_id not in seen]
        await asyncio.sleep(0)
    chosen = select_jobs(ctx, jobs, mine)
    page = ctx.int_arg("page", 1, 1, max(1, (len(chosen) + PER_PAGE - 1) // PER_PAGE))
    head: list[str] = [
        _sort_link(ctx, "id", "Job"),
        _sort_link(ctx, "name", "Name"),
        _sort_link(ctx, "user", "User"),
        "Account",
        "Partition",
        _sort_link(ctx, "state", "State"),
        "Time",
        _sort_link(ctx, "priority", "Priority"),
        "Size",
        _sort_link(ctx, "start", "Why / where"),
    ]
    pending = sum(1 for j in chosen if j.state == pb.JOB_STATE_PENDING)
    title = "My jobs" if mine else "Queue"
    body = el(
        "div",
        el("h1", title),
        el("p", f"{len(chosen)} jobs ({pending} pending)", class_="muted", id="count"),
        _filters(ctx, mine),
        pager(ctx, len(chosen), page, PER_PAGE),
        table(
            head,
            _rows(ctx, chosen[(page - 1) * PER_PAGE : page * PER_PAGE]),
            cls="jobs",
        )
        if chosen
        else el("p", "No jobs.", class_="muted"),
        pager(ctx, len(chosen), page, PER_PAGE),
    )
    return title, body
