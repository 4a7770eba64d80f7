"""The cluster: every node and every GPU, with its state, utilization and memory now,
the job and user on it, and why a node is drained or down. An idle node in a
reservation, or a hot spare, is counted and shown as sinfo words it (MAINT, RESERVED,
SPARE: corral/nodewords.py), not as idle."""

from __future__ import annotations

from corral import nodewords
from corral.errors import InvalidJobId
from corral.wire import corral_pb2 as pb
from ctld.web.html import Html, el
from ctld.web.page import Ctx, badge, gib, job_link, node_state, pager, when

PER_PAGE = 50  # nodes (400 GPUs) a page: ~70 KiB of HTML
STATES = (
    *("IDLE", "MIXED", "ALLOCATED", "DRAIN", "DRAINING", "DOWN", "FAIL", "UNKNOWN"),
    *("MAINT", "RESERVED", "SPARE"),
)
TROUBLE = frozenset({"DOWN", "DRAIN", "DRAINING", "FAIL"})


def _jobs_on(ctx: Ctx, node: pb.Node) -> list[pb.Job]:
    """The node's jobs this viewer may see at all, through the API's selection
    (GetJobs's, squeue -w's), as GetJobs would show them."""
    if not node.job_ids:
        return []
    try:
        return ctx.reads.shown_jobs(pb.JobFilter(job_ids=node.job_ids), ctx.who)
    except InvalidJobId:  # they all ended since the node's record was read
        return []


def _holders(jobs: list[pb.Job], node: pb.Node) -> dict[int, list[pb.Job]]:
    """GPU index -> the jobs on it."""
    out: dict[int, list[pb.Job]] = {}
    for job in jobs:
        for alloc in job.allocations:
            if alloc.node == node.name:
                for i in alloc.gpu_indices:
                    out.setdefault(i, []).append(job)
    return out


def _gpu(gpu: pb.Gpu, sample: pb.GpuStatus | None, jobs: list[pb.Job], busy: bool) -> Html:
    """One GPU's cell (kept small: a page shows up to 800 of them)."""
    busy = busy or bool(jobs)
    parts: list[object] = [el("b", f"GPU {gpu.index}")]
    if sample is not None:
        util = f"{sample.util_pct:.0f}"
        mem = f"{gib(sample.memory_used_mb)} / {gib(gpu.memory_mb)}"
        parts += [el("meter", max="100", value=util), el("span", f"{util}% · {mem}")]
        if sample.fault:
            parts.append(el("span", sample.fault, class_="reason"))
    else:
        parts.append(el("span", "no sample", class_="muted"))
    if jobs:
        parts.append(el("span", [[job_link(j.job_id), f" {j.user} "] for j in jobs]))
    elif busy:
        parts.append(el("span", "in use", class_="muted"))
    return el("div", *parts, class_="gpu busy" if busy else "gpu")


def shown_state(node: pb.Node) -> str:
    """The state a node is shown and counted under: sinfo's (MAINT for an idle node in
    a maintenance reservation, RESERVED in another, SPARE; else its state)."""
    return nodewords.summary_state(node_state(node.state), node.reservation, node.maint, node.spare)


def _node(ctx: Ctx, node: pb.Node) -> Html:
    state = shown_state(node)
    fresh = ctx.reads.gpus_now(node.name, ctx.now)
    jobs = _jobs_on(ctx, node)
    holders = _holders(jobs, node)
    res = node.resources
    title = [el("h3", node.name), badge(state)]
    if node.not_responding:
        title.append(badge("NOT RESPONDING", "down"))
    if node.reservation:
        kind = "maint" if node.maint else "resv"
        title.append(badge(f"{kind} {node.reservation}", "resv"))
    lines = [
        el(
            "p",
            f"CPUs {node.alloc_cpus}/{res.cpus} · "
            f"memory {gib(node.alloc_mem_mb)}/{gib(res.memory_mb)} · "
            f"GPUs {node.alloc_gpus}/{len(res.gpus)} · {', '.join(node.partitions)}",
            class_="muted",
        )
    ]
    if node.reason:
        by = f" by {node.reason_user}" if node.reason_user else ""
        lines.append(
            el(
                "p",
                el("strong", "Reason: "),
                node.reason,
                f"{by} {when(node.reason_time, ctx.now)}",
                class_="reason",
            )
        )
    allocated = ctx.reads.gpus_in_use(node.name)
    gpus = [
        _gpu(g, fresh.get(g.index), holders.get(g.index, []), g.index in allocated)
        for g in res.gpus
    ]
    cpu_jobs = [j for j in jobs if not j.num_gpus]
    if cpu_jobs:
        lines.append(el("p", "Jobs: ", [[job_link(j.job_id), f" {j.user} "] for j in cpu_jobs]))
    return el(
        "section",
        el("header", *title),
        *lines,
        el("div", *gpus, class_="gpus") if gpus else None,
        class_=f"node {state.lower()}",
        id=f"node-{node.name}",
    )


def _summary(nodes: list[pb.Node], ctx: Ctx) -> Html:
    counts: dict[str, int] = {}
    for n in nodes:
        s = shown_state(n)
        counts[s] = counts.get(s, 0) + 1
    total = sum(len(n.resources.gpus) for n in nodes)
    used = sum(n.alloc_gpus for n in nodes)
    utils = [g.util_pct for n in nodes for g in ctx.reads.gpus_now(n.name, ctx.now).values()]
    mean = f"{sum(utils) / len(utils):.0f}%" if utils else "no samples"
    items = [el("li", badge(s), f" {c}") for s, c in sorted(counts.items())]
    return el(
        "div",
        el(
            "p", f"{len(nodes)} nodes · GPUs allocated {used}/{total} · mean GPU utilization {mean}"
        ),
        el("ul", *items, class_="counts"),
        class_="summary",
    )


def _filters(ctx: Ctx, partitions: list[str]) -> Html:
    state, part, name = ctx.arg("state"), ctx.arg("partition"), ctx.arg("q")

    def select(field: str, values: list[str], chosen: str, label: str) -> Html:
        opts = [el("option", f"any {label}", value="")]
        opts += [el("option", v, value=v, selected=v == chosen) for v in values]
        return el("label", label, el("select", *opts, name=field))

    return el(
        "form",
        select("state", [*STATES, "TROUBLE"], state, "state"),
        select("partition", partitions, part, "partition"),
        el("label", "name", el("input", type="search", name="q", value=name, placeholder="node01")),
        el("button", "Filter", type="submit"),
        method="get",
        action="/",
        class_="filters",
    )


async def render(ctx: Ctx) -> tuple[str, Html]:
    nodes = ctx.reads.nodes([], with_hidden=True)  # every node: the operators' view
    state, part, name = ctx.arg("state").upper(), ctx.arg("partition"), ctx.arg("q")
    shown = [
        n
        for n in nodes
        if (
            not state
            or shown_state(n) == state
            or (state == "TROUBLE" and node_state(n.state) in TROUBLE)
        )
        and (not part or part in n.partitions)
        and (not name or name in n.name)
    ]
    page = ctx.int_arg("page", 1, 1, max(1, (len(shown) + PER_PAGE - 1) // PER_PAGE))
    cards = [_node(ctx, n) for n in shown[(page - 1) * PER_PAGE : page * PER_PAGE]]
    partitions = sorted({p for n in nodes for p in n.partitions})
    body = el(
        "div",
        el("h1", "Cluster"),
        _summary(nodes, ctx),
        _filters(ctx, partitions),
        pager(ctx, len(shown), page, PER_PAGE),
        el("div", *cards, class_="nodes") if cards else el("p", "No node matches.", class_="muted"),
        pager(ctx, len(shown), page, PER_PAGE),
    )
    return "Cluster", body
