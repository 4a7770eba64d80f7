"""corral report: GPU-hours (or another TRES) per account per day, as a table or a chart.

The same numbers as sreport (ReportUsage: the stored runs, clipped to each day), with
one bucket per local day. ``--plot out.png`` draws them as stacked bars with
matplotlib, an optional extra (``pip install 'corral[plot]'``): people would rather
look at that than read it.
"""

from __future__ import annotations

import argparse
import time

from client.common import client
from client.sreport import TRES_NAMES, tres_list
from client.views.accounting import UsageRecord
from corral.errors import CorralError, InvalidOption
from corral.slurmfmt import day_bounds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

PROG = "corral report"
PLOT_EXTRA = "plot"


def per_day(
    reply: t.ReportUsageResponse, bounds: Sequence[float], tres: str
) -> dict[str, list[float]]:
    """account -> hours of ``tres`` on each day (all users added up)."""
    days = len(bounds) - 1
    out: dict[str, list[float]] = {}
    for rec in map(UsageRecord, reply.get("records", [])):
        seconds = float(rec.tres_s.get(tres, 0.0))
        if not seconds:
            continue
        row = out.setdefault(rec.account or "root", [0.0] * days)
        row[rec.bucket] += seconds / 3600
    return dict(sorted(out.items()))


def unit(tres: str) -> str:
    return {"gres/gpu": "GPU-hours", "cpu": "CPU-hours", "node": "node-hours"}.get(
        tres, f"{tres}-hours" if tres != "mem" else "MB-hours"
    )


def format_table(table: dict[str, list[float]], bounds: Sequence[float], tres: str) -> str:
    days = [time.strftime("%Y-%m-%d", time.localtime(b)) for b in bounds[:-1]]
    label = unit(tres)
    lines = [f"{'Day':<10} {'Account':<15} {label:>12}"]
    for i, day in enumerate(days):
        for account, hours in table.items():
            if hours[i]:
                lines.append(f"{day:<10} {account:<15} {hours[i]:>12.2f}")
    total = sum(sum(h) for h in table.values())
    lines.append(f"{'total':<10} {'':<15} {total:>12.2f}")
    return "\n".join(lines) + "\n"


def plot(
    table: dict[str, list[float]], bounds: Sequence[float], tres: str, path: str, cluster: str
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorralError(
            f"--plot needs matplotlib, the optional extra '{PLOT_EXTRA}': "
            f"pip install 'corral[{PLOT_EXTRA}]'"
        ) from None
    days = [time.strftime("%m-%d", time.localtime(b)) for b in bounds[:-1]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(days) + 3), 4.5))
    bottom = [0.0] * len(days)
    for account, hours in table.items():
        ax.bar(days, hours, bottom=bottom, label=account)
        bottom = [b + h for b, h in zip(bottom, hours, strict=True)]
    ax.set_ylabel(unit(tres))
    ax.set_title(f"{unit(tres)} per account per day ({cluster})")
    if table:
        ax.legend(title="account")
    ax.tick_params(axis="x", labelrotation=45)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise CorralError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def main_args(argv: Sequence[str]) -> int:
    from client.sacct import parse_when

    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--start", "-S", help="first day (Slurm's time forms; default: 6 days ago)")
    p.add_argument("--end", "-E", help="end (default: now)")
    p.add_argument("--tres", "-T", default="gres/gpu", help=f"one of {', '.join(TRES_NAMES)}")
    p.add_argument("--account", "-A", action="append", default=[], help="only these accounts")
    p.add_argument("--plot", metavar="OUT.png", help="draw a chart into this file")
    p.add_argument(
        "--ettr", action="store_true", help="effective training time per user/account/partition"
    )
    p.add_argument("--power", action="store_true", help="hours powered down, energy saved")
    args = p.parse_args(list(argv))
    if args.power:
        from client.report_power import power_report

        return power_report()
    tres = tres_list(args.tres)
    if len(tres) != 1:
        raise InvalidOption("corral report draws one TRES at a time")
    now = time.time()
    end = min(parse_when(args.end, now), now) if args.end else now
    start = parse_when(args.start, now) if args.start else now - 6 * 86400
    if start >= end:
        raise InvalidOption("--start must be before --end")
    if args.ettr:
        from client.report_ettr import report

        return report(start, end, args.plot)
    bounds = day_bounds(start, end)
    request: t.ReportUsageRequest = {"bounds": bounds}
    accounts = [a for item in args.account for a in item.split(",") if a]
    if accounts:
        request["accounts"] = accounts
    api = client()
    reply = api.report_usage(request)
    table = per_day(reply, bounds, tres[0])
    if args.plot:
        plot(table, bounds, tres[0], args.plot, reply.get("cluster", ""))
        print(f"corral report: wrote {args.plot}")
    else:
        print(format_table(table, bounds, tres[0]), end="")
    return 0
