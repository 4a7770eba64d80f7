"""Usage per account and user over a chosen window: what ``sreport`` and ``corral
report`` compute (the ReportUsage RPC, so the same sums and the same private_data
rule), per day, as stacked bars and a table."""

from __future__ import annotations

import time

from corral.slurmfmt import day_bounds
from corral.wire import corral_pb2 as pb
from ctld.web.charts import stacked_bars
from ctld.web.html import Html, el
from ctld.web.page import Ctx, table

TRES = {
    "gres/gpu": "GPU-hours",
    "cpu": "CPU-hours",
    "node": "node-hours",
    "mem": "MB-hours",
    "billing": "billing-hours",
}
MAX_DAYS = 366


def _hours(h: float) -> str:
    """sreport's two decimals, or two significant digits for a sliver of an hour."""
    return f"{h:.2f}" if h >= 0.1 else f"{h:.2g}"


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _window(ctx: Ctx) -> tuple[float, float, str]:
    """[start, end) from ``start``/``end`` dates (YYYY-MM-DD), else the last ``days``."""
    start_s, end_s = ctx.arg("start"), ctx.arg("end")
    try:
        if start_s:
            start = time.mktime(time.strptime(start_s, "%Y-%m-%d"))
            end = time.mktime(time.strptime(end_s, "%Y-%m-%d")) + 86400 if end_s else ctx.now
            end = min(end, ctx.now)
            if start < end and end - start <= MAX_DAYS * 86400:
                return start, end, ""
            return (
                ctx.now - 7 * 86400,
                ctx.now,
                "the window must be 1 to 366 days, ending by now: showing the last 7 days",
            )
    except ValueError:
        return ctx.now - 7 * 86400, ctx.now, "dates are YYYY-MM-DD: showing the last 7 days"
    days = ctx.int_arg("days", 7, 1, MAX_DAYS)
    return ctx.now - days * 86400, ctx.now, ""


def _form(ctx: Ctx, tres: str, by: str) -> Html:
    days = ctx.arg("days", "7")
    return el(
        "form",
        el(
            "label",
            "last",
            el(
                "select",
                [
                    el("option", f"{d} days", value=str(d), selected=str(d) == days)
                    for d in (1, 7, 30, 90, 365)
                ],
                name="days",
            ),
        ),
        el("label", "or from", el("input", type="date", name="start", value=ctx.arg("start"))),
        el("label", "to", el("input", type="date", name="end", value=ctx.arg("end"))),
        el(
            "label",
            "of",
            el(
                "select",
                [el("option", u, value=k, selected=k == tres) for k, u in TRES.items()],
                name="tres",
            ),
        ),
        el(
            "label",
            "by",
            el(
                "select",
                [el("option", v, value=v, selected=v == by) for v in ("account", "user")],
                name="by",
            ),
        ),
        el("button", "Show", type="submit"),
        method="get",
        action="/usage",
        class_="filters",
    )


async def render(ctx: Ctx) -> tuple[str, Html]:
    tres = ctx.arg("tres", "gres/gpu")
    tres = tres if tres in TRES else "gres/gpu"
    by = "user" if ctx.arg("by") == "user" else "account"
    start, end, note = _window(ctx)
    bounds = day_bounds(start, end)
    reply = await ctx.api.report_usage(pb.ReportUsageRequest(bounds=bounds), ctx.who)
    days = len(bounds) - 1
    per: dict[str, list[float]] = {}
    totals: dict[tuple[str, str], float] = {}
    for rec in reply.records:
        hours = rec.tres_s.get(tres, 0.0) / 3600
        if not hours:
            continue
        key = rec.user if by == "user" else (rec.account or "root")
        per.setdefault(key, [0.0] * days)[rec.bucket] += hours
        totals[(rec.account or "root", rec.user)] = (
            totals.get((rec.account or "root", rec.user), 0.0) + hours
        )
    labels = [time.strftime("%m-%d", time.localtime(b)) for b in bounds[:-1]]
    unit = TRES[tres]
    capacity = reply.capacity.get(tres, 0.0) * (end - start) / 3600
    grand = sum(totals.values())
    rows = [
        [account, user, _hours(hours), f"{hours / capacity:.2%}" if capacity else ""]
        for (account, user), hours in sorted(totals.items(), key=lambda kv: -kv[1])
    ]
    window = f"{_stamp(start)} to {_stamp(end)}"
    body = el(
        "div",
        el("h1", "Usage"),
        el(
            "p",
            f"{unit} per {by}, {window}: {_hours(grand)} in all"
            + (f", {grand / capacity:.1%} of the cluster's capacity" if capacity else ""),
            class_="muted",
        ),
        el("p", note, class_="notice") if note else None,
        _form(ctx, tres, by),
        stacked_bars(labels, sorted(per.items()), unit=unit, label=f"{unit} per day by {by}"),
        table(["Account", "User", unit, "Share of capacity"], rows)
        if rows
        else el("p", "No usage in this window.", class_="muted"),
        el(
            "p",
            "The same sums as sreport and corral report: each run clipped to each day; "
            "a running job counts up to now.",
            class_="muted",
        ),
    )
    return "Usage", body
