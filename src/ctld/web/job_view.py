"""A job's page: its story (submit, starts, requeues and why, steps), ``corral why``'s
words while it waits, its GPUs' utilization and memory over time, its efficiency as
``seff`` computes it, and, for its owner and operators only, its script, environment
and output (everyone else gets ``Policy.shown``'s scrubbed copy, which has none)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from corral.efficiency import job_efficiency, lines
from corral.errors import InvalidJobId
from corral.ettr import Interrupted, ettr
from corral.reasons import reason_words
from corral.slurmfmt import format_duration, format_timestamp
from corral.whytext import explain_text
from corral.wire import corral_pb2 as pb
from ctld.codec.jsonmap import message_to_json
from ctld.model.gpu_samples import Series
from ctld.web import output
from ctld.web.charts import line_chart
from ctld.web.html import Html, el
from ctld.web.page import Ctx, badge, elapsed, gib, job_link, job_state, table, when

MAX_LINES = 8  # GPUs drawn one line each; more are drawn as their mean and peak
OUTPUT_WAIT_S = 2.0  # an output file's tail, at most, before the page goes without it
ACTIVE = (pb.JOB_STATE_PENDING, pb.JOB_STATE_RUNNING, pb.JOB_STATE_COMPLETING)


@dataclass
class Found:
    """A job as this viewer may see it, its earlier runs (a requeued job's), and
    whether it is in ctld's memory (else: its stored record)."""

    job: pb.Job
    earlier: list[pb.Job]
    live: bool


async def find(ctx: Ctx, job_id: int) -> Found:
    """The job as this viewer may see it (InvalidJobId when not at all): a live one
    through GetJobs's selection (squeue -j's), with its spec; else its stored story as
    ``corral history`` gets it (QueryAccounting's, with sacct's rule). Earlier runs are
    QueryAccounting's (sacct -D's) either way."""
    story = pb.QueryAccountingRequest(
        filter=pb.JobFilter(job_ids=[job_id]), duplicates=True, with_events=True
    )
    try:
        live = ctx.reads.visible_jobs(pb.JobFilter(job_ids=[job_id]), ctx.who)
    except InvalidJobId:
        live = []
    job = next((j for j in live if j.job_id == job_id), None)  # not an array's other tasks
    if job is not None:
        shown = ctx.reads.shown(ctx.who, job, with_spec=True)
        if not job.restart_count:
            return Found(shown, [], live=True)
        story.with_events = False  # the live record has them
        runs = await ctx.reads.accounting_runs(story, ctx.who)
        return Found(shown, runs[:-1], live=True)  # the last is this run's stored row
    # a job that left memory (or one this viewer may not see: then none)
    runs = [r for r in await ctx.reads.accounting_runs(story, ctx.who) if r.job_id == job_id]
    if not runs:
        raise InvalidJobId()
    return Found(runs[-1], runs[:-1], live=False)


def _reason(job: pb.Job) -> str:
    if job.state == pb.JOB_STATE_PENDING:
        return f"{reason_words(job.reason)} [{job.reason}]"
    return "" if job.reason == "None" else job.reason


def _summary(ctx: Ctx, job: pb.Job) -> Html:
    spec = job.spec
    limit = "UNLIMITED" if job.time_limit_s < 0 else format_duration(job.time_limit_s)
    rows: list[tuple[str, object]] = [
        ("State", badge(job_state(job.state))),
        ("Reason", _reason(job)),
        ("User / account", f"{job.user} / {job.account or '-'} (QOS {job.qos or '-'})"),
        ("Partition", job.partition),
        ("Submitted", when(job.submit_time, ctx.now)),
        ("Started", when(job.start_time, ctx.now)),
        ("Ended", when(job.end_time, ctx.now)),
        ("Elapsed / limit", f"{elapsed(job, ctx.now)} / {limit}"),  # this run's
        (
            "Size",
            f"{job.num_nodes} node(s), {job.num_cpus} CPUs, {gib(job.mem_mb)}, {job.num_gpus} GPUs",
        ),
        # a pending job has no nodes yet: the forecast's are its planned ones (below)
        ("Nodes", job.nodelist if job.state != pb.JOB_STATE_PENDING else ""),
        ("Exit", f"{job.exit_code}:{job.exit_signal}" if job.end_time else ""),
        ("Restarts", str(job.restart_count) if job.restart_count else ""),
        ("Effective training time", _ettr(job, ctx.now)),
        ("Submit line", spec.submit_line),
        ("Work dir", spec.work_dir),
    ]
    if job.state == pb.JOB_STATE_PENDING and job.expected_start:
        rows.append(("Expected start", when(job.expected_start, ctx.now)))
    if job.state == pb.JOB_STATE_PENDING and job.forecast_nodes:
        rows.append(("Planned nodes", f"{job.forecast_nodes} (the forecast's, not held)"))
    items = [[el("dt", k), el("dd", v)] for k, v in rows if v]
    return el("dl", items, class_="facts")


def _ettr(job: pb.Job, now: float) -> str:
    """A requeued job's ETTR as sacct's field has it (from its first start; Elapsed is
    the current run's, as Slurm's): shown once the job was interrupted."""
    if not job.interruptions:
        return ""
    items = [Interrupted(i.time, i.lost_s, i.next_start) for i in job.interruptions]
    figures = ettr(job.first_start_time, job.end_time, items, now)
    if figures.ratio is None:
        return ""
    return (
        f"ETTR {100 * figures.ratio:.1f}% over {format_duration(figures.wall_s)} since the "
        f"first start; lost {format_duration(figures.lost_s)}, restarts "
        f"{format_duration(figures.overhead_s)} ({figures.interruptions} interruption(s))"
    )


async def _why(ctx: Ctx, found: Found) -> Html | None:
    job = found.job
    if job.state != pb.JOB_STATE_PENDING or not found.live:
        return None
    reply = await ctx.api.explain_job(pb.ExplainJobRequest(job_id=job.job_id), ctx.who)
    return el(
        "section",
        el("h2", "Why it waits (corral why)"),
        el("pre", explain_text(message_to_json(reply))),
        id="why",
    )


def _story(ctx: Ctx, job: pb.Job, runs: list[pb.Job]) -> Html:
    rows = []
    for e in job.events:
        move = ""
        if e.from_state != e.to_state:
            was = job_state(e.from_state) if e.from_state else ""
            move = f"{was} → {job_state(e.to_state)}"
        rows.append(
            [format_timestamp(e.time), el("strong", e.event), move, e.detail, el("code", e.cause)]
        )
    parts: list[object] = [el("h2", "Story")]
    parts.append(
        table(["Time", "Event", "State", "Detail", "Cause"], rows, cls="story")
        if rows
        else el("p", "No events kept.", class_="muted")
    )
    if runs:
        parts.append(el("h3", "Earlier runs"))
        parts.append(
            table(
                ["Run", "Nodes", "Started", "Ended", "How it ended"],
                [
                    [
                        str(r.restart_count),
                        r.nodelist,
                        format_timestamp(r.start_time),
                        format_timestamp(r.end_time),
                        r.reason or job_state(r.state),
                    ]
                    for r in runs
                ],
            )
        )
    return el("section", *parts, id="story")


def _steps(job: pb.Job) -> Html | None:
    if not job.steps:
        return None
    rows = [
        [
            f"{s.job_id}.{s.step_id}",
            s.name,
            badge(job_state(s.state)),
            s.nodelist,
            str(s.ntasks),
            format_timestamp(s.start_time),
            format_timestamp(s.end_time),
            f"{s.exit_code}:{s.exit_signal}" if s.end_time else "",
        ]
        for s in job.steps
    ]
    return el(
        "section",
        el("h2", "Steps"),
        table(["Step", "Name", "State", "Nodes", "Tasks", "Started", "Ended", "Exit"], rows),
        id="steps",
    )


def _gpu_charts(ctx: Ctx, job: pb.Job) -> Html | None:
    series = ctx.reads.gpu_series(ctx.who, job)
    if not job.num_gpus and not series:
        return None
    named = sorted(series.items())
    if len(named) <= MAX_LINES:
        util = [(f"{n}:{i}", [(t, u) for t, u, _ in s.points]) for (n, i), s in named]
        mem = [(f"{n}:{i}", [(t, m / 1024) for t, _, m in s.points]) for (n, i), s in named]
    else:  # many GPUs: their mean and their peak at each time
        util, mem = _spread(named)
    held = ctx.reads.known_nodes([a.node for a in job.allocations], ("resources",))
    top_mem = max((g.memory_mb for n in held for g in n.resources.gpus), default=0) / 1024
    top_mem = max(top_mem, max((v for _, s in mem for _, v in s), default=1.0))
    return el(
        "section",
        el("h2", "GPUs over time"),
        el(
            "p",
            "From noded's samples with each heartbeat; kept in ctld's memory while the job is.",
            class_="muted",
        ),
        el(
            "div",
            line_chart(util, top=100, unit="%", label="GPU utilization"),
            line_chart(mem, top=top_mem, unit="G", label="GPU memory (GiB)"),
            class_="charts",
        ),
        id="gpus",
    )


Line = tuple[str, list[tuple[float, float]]]


def _spread(named: list[tuple[tuple[str, int], Series]]) -> tuple[list[Line], list[Line]]:
    by_time: dict[float, list[tuple[float, float]]] = {}
    for _, s in named:
        for t, u, m in s.points:
            by_time.setdefault(round(t), []).append((u, m / 1024))
    times = sorted(by_time)
    util = [
        ("mean", [(t, sum(u for u, _ in by_time[t]) / len(by_time[t])) for t in times]),
        ("peak", [(t, max(u for u, _ in by_time[t])) for t in times]),
    ]
    mem = [("peak", [(t, max(m for _, m in by_time[t])) for t in times])]
    return util, mem


def _efficiency(ctx: Ctx, job: pb.Job) -> Html:
    gpu_mem = 0.0
    if job.allocations and job.allocations[0].gpu_indices:
        first = job.allocations[0]
        for node in ctx.reads.known_nodes([first.node], ("resources",)):
            gpu_mem = next(
                (g.memory_mb for g in node.resources.gpus if g.index == first.gpu_indices[0]), 0
            )
    eff = job_efficiency(job, job_state(job.state), now=ctx.now, gpu_memory_mb=gpu_mem)
    text = lines(eff, pending=job.state == pb.JOB_STATE_PENDING or job.start_time <= 0)
    note = "The same figures as seff (corral/efficiency.py); noded reports usage when the job ends."
    return el(
        "section",
        el("h2", "Efficiency (seff)"),
        el("pre", "\n".join(text)),
        el("p", note, class_="muted"),
        id="efficiency",
    )


async def _private(ctx: Ctx, job: pb.Job) -> Html:
    """Script, environment, output: the owner's and operators' only."""
    if not ctx.policy.sees_spec(ctx.who, job):
        return el(
            "section",
            el("h2", "Script, environment and output"),
            el("p", "Hidden: only the job's owner and operators see them.", class_="muted"),
            id="private",
        )
    spec = job.spec
    env = "\n".join(f"{k}={v}" for k, v in sorted(spec.environment.items()))
    parts: list[object] = [
        el("h2", "Script"),
        el("pre", spec.script or "(none: an allocation)", class_="script"),
    ]
    parts += [
        el(
            "details",
            el("summary", f"Environment ({len(spec.environment)} variables)"),
            el("pre", env),
            class_="env",
        )
    ]
    paths = dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p)
    for path in paths:
        try:  # a path on a hung network file system: the page answers, the thread waits
            text, why = await asyncio.wait_for(
                asyncio.to_thread(output.tail, path, job.uid), OUTPUT_WAIT_S
            )
        except TimeoutError:
            text, why = "", f"not shown: not read within {OUTPUT_WAIT_S:g} s"
        parts += [
            el("h3", f"Output: {path}"),
            el("pre", text, class_="output") if not why else el("p", why, class_="muted"),
        ]
    return el("section", *parts, id="private")


def _actions(ctx: Ctx, job: pb.Job) -> Html | None:
    """The page's script posts it with the session token (CancelJobs checks again)."""
    if job.state not in ACTIVE or not (job.uid == ctx.who.uid or ctx.policy.is_operator(ctx.who)):
        return None
    return el(
        "form",
        el("button", f"Cancel job {job.job_id}", type="submit", class_="danger"),
        method="post",
        action=f"/job/{job.job_id}/cancel",
        class_="actions",
    )


async def render(ctx: Ctx, job_id: int) -> tuple[str, Html]:
    found = await find(ctx, job_id)
    job = found.job
    title = f"Job {job_id}"
    body = el(
        "div",
        el("h1", title, " ", el("span", job.spec.name, class_="jobname")),
        _actions(ctx, job),
        _summary(ctx, job),
        await _why(ctx, found),
        _story(ctx, job, found.earlier),
        _steps(job),
        _gpu_charts(ctx, job),
        _efficiency(ctx, job),
        await _private(ctx, job),
        el("p", "Array job ", job_link(job.array_job_id))
        if job.array_job_id and job.array_job_id != job.job_id
        else None,
    )
    return title, body
