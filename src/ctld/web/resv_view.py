"""Advance reservations on a timeline (scontrol show reservation, drawn)."""

from __future__ import annotations

from corral.wire import corral_pb2 as pb
from ctld.web.charts import timeline
from ctld.web.html import Html, el
from ctld.web.page import Ctx, table, when

DAY = 86400.0


async def render(ctx: Ctx) -> tuple[str, Html]:
    reply = await ctx.api.get_reservations(pb.GetReservationsRequest(), ctx.who)
    now = ctx.now
    resvs = sorted(reply.reservations, key=lambda r: (r.start_time, r.name))
    if ctx.arg("days"):
        horizon = ctx.int_arg("days", 7, 1, 90) * DAY
    else:  # fit the reservations ahead (at least a day, at most 90)
        ends = [r.end_time or r.start_time + DAY for r in resvs if (r.end_time or now + 1) > now]
        horizon = min(max([DAY, *(e - now for e in ends)]) * 1.05, 90 * DAY)
    t0, t1 = now - horizon / 10, now + horizon
    rows = []
    for r in resvs:
        if r.end_time and r.end_time < t0:
            continue
        cls = "maint" if "MAINT" in r.flags else "active" if r.start_time <= now else "future"
        rows.append((f"{r.name} ({r.nodes})", r.start_time, r.end_time, cls))
    listing = [
        [
            r.name,
            r.nodes,
            when(r.start_time, now),
            when(r.end_time, now) if r.end_time else "no end",
            ", ".join(r.users) or "-",
            ", ".join(r.accounts) or "-",
            ", ".join(r.flags) or "-",
        ]
        for r in resvs
    ]
    body = el(
        "div",
        el("h1", "Reservations"),
        el(
            "form",
            el(
                "label",
                "next",
                el(
                    "select",
                    el("option", "to fit", value=""),
                    [
                        el(
                            "option",
                            f"{d} days",
                            value=str(d),
                            selected=ctx.arg("days") == str(d),
                        )
                        for d in (1, 7, 30, 90)
                    ],
                    name="days",
                ),
            ),
            el("button", "Show", type="submit"),
            method="get",
            action="/reservations",
            class_="filters",
        ),
        timeline(rows, t0=t0, t1=t1, now=now),
        table(["Name", "Nodes", "Starts", "Ends", "Users", "Accounts", "Flags"], listing)
        if listing
        else None,
    )
    return "Reservations", body
