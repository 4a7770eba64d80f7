"""corral sim TRACE: replay an SWF trace with each policy and print a table.

(``corral sim --from-store``, the site's own history, is site_cli.py.)"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ctld.sim import swf
from ctld.sim.engine import POLICIES, replay
from ctld.sim.metrics import summarize
from ctld.sim.power import PowerSettings


def main(argv: list[str]) -> int:
    if any(a == "--from-store" or a.startswith("--from-store=") for a in argv):
        from ctld.sim.site_cli import main as from_store

        return from_store(argv)  # the site's own history (docs/simulator.md)
    ap = argparse.ArgumentParser(
        prog="corral sim",
        description=__doc__,
        epilog="corral sim --from-store [CONFIG|URL] ... replays the site's own history "
        "(corral sim --from-store -h)",
    )
    ap.add_argument("trace", type=Path)
    ap.add_argument(
        "--policy",
        action="append",
        choices=sorted(POLICIES),
        help="repeatable; default: fcfs, easy, corral",
    )
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs (0: all)")
    ap.add_argument("--procs", type=int, default=0, help="machine size (default: the header's)")
    ap.add_argument(
        "--starvation-guard",
        type=float,
        default=None,
        metavar="HOURS",
        help="the corral policies' starvation guard (default: ctld's; 0: off)",
    )
    ap.add_argument(
        "--suspend-time",
        type=float,
        action="append",
        metavar="MIN",
        help="repeatable: also replay with power saving at this suspend_time (minutes), "
        "and print what it saved against the wait it added",
    )
    ap.add_argument("--resume-timeout", type=float, default=300.0, metavar="S")
    ap.add_argument("--suspend-timeout", type=float, default=60.0, metavar="S")
    ap.add_argument("--idle-watts", type=float, default=200.0, metavar="W")
    args = ap.parse_args(argv)
    if args.starvation_guard is not None and args.starvation_guard < 0:
        print("corral sim: --starvation-guard must be >= 0 hours", file=sys.stderr)
        return 2
    try:
        trace = swf.load(args.trace, args.jobs)
    except OSError as exc:
        print(f"corral sim: cannot read {args.trace}: {exc.strerror}", file=sys.stderr)
        return 1
    except swf.SwfError as exc:
        print(f"corral sim: error: {exc}", file=sys.stderr)
        return 1
    procs = args.procs or trace.max_procs
    if procs <= 0:
        print("corral sim: the trace has no MaxProcs header: give --procs", file=sys.stderr)
        return 1
    print(f"{args.trace.name}: {len(trace.jobs)} jobs on {procs} processors\n")
    if args.suspend_time:
        return power_table(args, trace.jobs, procs)
    print(
        "| policy | jobs | utilization | mean wait min | p95 wait min | max wait h | mean bsld "
        "| forecast error median / p90 min | top jobs: backfilled on predictions "
        "/ delayed (mean, max min) | pass ms mean | corrected forecast median / p90 min |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for policy in args.policy or ["fcfs", "easy", "corral"]:
        pol = POLICIES[policy]
        if args.starvation_guard is not None and policy.startswith("corral"):
            guard = args.starvation_guard * 3600
            pol = replace(pol, settings=replace(pol.settings, starve_after_s=guard))
        s = summarize(replay(trace.jobs, procs, pol))
        delayed = (
            f"{s.top_delayed} ({s.top_delay_mean_s / 60:.0f}, {s.top_delay_max_s / 60:.0f})"
            if s.top_delayed
            else "0"
        )
        print(
            f"| {policy} | {s.jobs} | {s.utilization:.3f} | {s.wait_mean_s / 60:.1f} | "
            f"{s.wait_p95_s / 60:.1f} | {s.wait_max_s / 3600:.1f} | {s.bsld_mean:.1f} | "
            f"{s.forecast_median_s / 60:.1f} / {s.forecast_p90_s / 60:.1f} | "
            f"{s.top_jobs}: {s.top_backfilled} / {delayed} | {s.pass_mean_ms:.2f} | "
            f"{s.corrected_median_s / 60:.1f} / {s.corrected_p90_s / 60:.1f} |",
            flush=True,
        )
    return 0


def power_table(args: argparse.Namespace, jobs: tuple[swf.TraceJob, ...], procs: int) -> int:
    """Each policy without power saving, then at each --suspend-time (sim/power.py)."""
    print(
        f"power saving: every processor a node; resume_timeout {args.resume_timeout:g} s, "
        f"suspend_timeout {args.suspend_timeout:g} s, {args.idle_watts:g} W idle\n"
    )
    print(
        "| policy | suspend_time min | node-hours powered down | share of node-hours "
        "| energy saved MWh | nodes woken | mean wait min | mean bsld |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for policy in args.policy or ["corral"]:
        base = summarize(replay(jobs, procs, policy))
        print(
            f"| {policy} | off | 0 | 0 | 0 | 0 | {base.wait_mean_s / 60:.1f} | "
            f"{base.bsld_mean:.2f} |",
            flush=True,
        )
        for minutes in args.suspend_time:
            settings = PowerSettings(minutes * 60, args.resume_timeout, args.suspend_timeout)
            result = replay(jobs, procs, policy, power=settings)
            s, pool = summarize(result), result.power
            assert pool is not None
            span = max(o.end for o in result.outcomes) - jobs[0].submit
            hours = pool.off_seconds / 3600
            print(
                f"| {policy} | {minutes:g} | {hours:,.0f} | {hours / (span * procs / 3600):.1%} "
                f"| {hours * args.idle_watts / 1e6:,.1f} | {pool.resumes:,} | "
                f"{s.wait_mean_s / 60:.1f} ({(s.wait_mean_s - base.wait_mean_s) / 60:+.1f}) | "
                f"{s.bsld_mean:.2f} ({s.bsld_mean - base.bsld_mean:+.2f}) |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
