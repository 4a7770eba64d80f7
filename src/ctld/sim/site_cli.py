"""corral sim --from-store: replay the site's own history under its running configuration
and under a candidate one, and say what would change for each partition, account and
user (docs/simulator.md, "What-if on the site's own history").

    corral sim --from-store [CONFIG|STORE_URL] [--start T] [--end T]
               [--config CANDIDATE.toml] [--set KEY=VALUE ...] [--plot OUT.png]
    corral sim --from-store [CONFIG|STORE_URL] [--start T] [--end T] --export-swf OUT.swf
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from corral.errors import ConfigError, CorralError, InvalidOption
from corral.slurmfmt import format_timestamp, parse_timestamp
from ctld.sim import history as hist
from ctld.sim import site as sitemod
from ctld.sim.site_engine import SiteReplay
from ctld.sim.site_jobs import replay_jobs
from ctld.sim.site_report import (
    GROUPS,
    Fidelity,
    Run,
    fidelity,
    real_rows,
    replay_rows,
    summarize,
    table,
)

PROG = "corral sim"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="replay the site's history (the accounting store) under its running "
        "configuration and a candidate one",
    )
    ap.add_argument(
        "--from-store",
        nargs="?",
        const="",
        metavar="CONFIG|URL",
        required=True,
        help="the running config file (its store_url), or a store URL (then -f names the "
        "config); default: $CORRAL_CONF or /etc/corral/corral.toml",
    )
    ap.add_argument("-f", dest="running", metavar="CONFIG", help="the running config file")
    ap.add_argument(
        "--start",
        help="the window's start (YYYY-MM-DD[THH:MM[:SS]], now-7days, "
        "epoch seconds; default: the first job)",
    )
    ap.add_argument("--end", help="the window's end (default: now)")
    ap.add_argument("--config", metavar="FILE", help="the candidate: another config file")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="repeatable: a candidate key (scheduler.placement=fgd, "
        'accounts.ml.shares=2, partitions.gpu.max_time="2:00:00")',
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=60.0,
        metavar="S",
        help="fidelity: a start within S seconds of the real one matches (60)",
    )
    ap.add_argument(
        "--tolerance-pct",
        type=float,
        default=10.0,
        metavar="PCT",
        help="... or within PCT%% of the job's real wait, if larger (10)",
    )
    ap.add_argument(
        "--by",
        default=",".join(GROUPS),
        help="tables to print: partition,account,user (default all)",
    )
    ap.add_argument("--plot", metavar="OUT.png", help="draw the report into this file")
    ap.add_argument("--json", action="store_true", help="the report as one JSON document")
    ap.add_argument(
        "--export-swf",
        metavar="OUT.swf",
        help="write the window's jobs as an anonymised SWF trace (no replay)",
    )
    return ap


def when(text: str | None, now: float, what: str) -> float | None:
    """A window bound: Slurm's time forms, ``now-N[units]``, or epoch seconds."""
    if text is None:
        return None
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    if t.lower().startswith("now-"):
        return 2 * now - parse_timestamp("now+" + t[4:], now=now, what=what)
    return parse_timestamp(t, now=now, what=what)


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    try:
        return run(args)
    except (CorralError, OSError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"{PROG}: error: {text}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    bad = [g for g in args.by.split(",") if g not in GROUPS]
    if bad:
        raise InvalidOption(f"--by {bad[0]!r}: one of {', '.join(GROUPS)}")
    if args.tolerance < 0 or args.tolerance_pct < 0:
        raise InvalidOption("--tolerance and --tolerance-pct must be >= 0")
    source = args.from_store or ""
    is_url = "://" in source
    where, document = sitemod.read_document(args.running or (None if is_url else source or None))
    running_config = sitemod.make_config(document, where)
    url = source if is_url else running_config.controller.effective_store_url
    now = time.time()
    start, end = when(args.start, now, "--start"), when(args.end, now, "--end")
    horizon = 8 * running_config.priority.decay_half_life_s
    history = hist.read(hist.open_engine(url), start, end, usage_horizon_s=horizon)
    if args.export_swf:
        return export(args.export_swf, history, running_config)
    candidate_doc = None
    if args.config:
        cwhere, candidate_doc = sitemod.read_document(args.config)
    elif args.set:
        cwhere, candidate_doc = where, document
    sizes = sitemod.node_sizes(running_config, (*history.jobs, *history.before))
    running = sitemod.running_site(running_config, history.accounting)
    running.nodes = sizes
    shards = {s.name: s.shards_per_gpu for s in sizes}
    sites = [running]
    if candidate_doc is not None:
        doc = sitemod.apply_overrides(candidate_doc, args.set)
        config = sitemod.make_config(doc, f"{cwhere} (candidate)")
        cand = sitemod.candidate_site(
            running, config, history.accounting, sitemod.describe_changes(running_config, config)
        )
        cand.nodes = sitemod.node_sizes(config, (*history.jobs, *history.before))
        sites.append(cand)
    jobs0 = replay_jobs(history, shards)
    real = Run("real", real_rows(jobs0), running)
    runs = [real]
    timings = []
    for site in sites:
        jobs = replay_jobs(history, shards)  # a fresh copy: a replay changes its jobs
        began = time.process_time()
        replay = SiteReplay(site, history, jobs)
        outcomes = replay.run()
        timings.append((site.name, time.process_time() - began, replay.passes))
        runs.append(Run(site.name, replay_rows(jobs, outcomes), site))
    gpus_in = {p.name: p.nodes for p in running_config.partitions}
    by_node = {s.name: s.gpus for s in sizes}
    for r in runs:
        summarize(r, history, lambda part: sum(by_node.get(n, 0) for n in gpus_in.get(part, ())))
    fid = fidelity(real.rows, runs[1].rows, args.tolerance, args.tolerance_pct)
    changes = list(sites[1].changes) if len(sites) > 1 else []
    if args.json:
        print(json.dumps(report_document(history, runs, fid, changes, timings), indent=1))
    else:
        print(heading(history, sizes, len(real.rows), timings))
        if len(sites) > 1:
            print("candidate: " + ("; ".join(changes) or "the same as the running config"))
        print(fid.line())
        for group in args.by.split(","):
            print()
            print(table(group, runs))
    if args.plot:
        from ctld.sim.site_plot import plot

        plot(runs, args.plot, f"{running_config.cluster_name}: {window_text(history)}")
        print(f"\n{PROG}: wrote {args.plot}")
    return 0


def report_document(
    history: hist.History,
    runs: Sequence[Run],
    fid: Fidelity,
    changes: list[str],
    timings: Sequence[tuple[str, float, int]],
) -> dict[str, Any]:
    """The report as plain data (``--json``): every run's totals and groups."""
    return {
        "window": {"start": history.start, "end": history.end, "jobs": len(runs[0].rows)},
        "changes": changes,
        "fidelity": {**dataclasses.asdict(fid), "line": fid.line()},
        "replays": [{"name": n, "cpu_s": cpu, "passes": p} for n, cpu, p in timings],
        "runs": {
            r.name: {
                "total": dataclasses.asdict(r.total),
                **{
                    g: {name: dataclasses.asdict(s) for name, s in stats.items()}
                    for g, stats in r.groups.items()
                },
            }
            for r in runs
        },
    }


def window_text(history: hist.History) -> str:
    span = history.end - history.start
    if span >= 2 * 86400:
        length = f"{span / 86400:.1f} days"
    elif span >= 7200:
        length = f"{span / 3600:.1f} h"
    else:
        length = f"{span / 60:.1f} min"
    return f"{format_timestamp(history.start)} .. {format_timestamp(history.end)} ({length})"


def heading(
    history: hist.History,
    sizes: Sequence[sitemod.NodeSize],
    jobs: int,
    timings: Sequence[tuple[str, float, int]],
) -> str:
    gpus = sum(s.gpus for s in sizes)
    lines = [f"{jobs} jobs submitted {window_text(history)} on {len(sizes)} nodes, {gpus} GPUs"]
    guessed = [s.name for s in sizes if s.inferred]
    if guessed:
        lines.append(
            f"node sizes not in the config (discovered at run time) taken from their jobs' "
            f"largest use, a lower bound: {', '.join(guessed[:8])}"
            + (f" and {len(guessed) - 8} more" if len(guessed) > 8 else "")
        )
    for name, cpu, passes in timings:
        rate = f", {jobs / cpu:,.0f} jobs per CPU second" if cpu > 0 else ""
        lines.append(
            f"replay under the {name} configuration: {passes} passes, {cpu:.1f} s CPU{rate}"
        )
    return "\n".join(lines)


def export(path: str, history: hist.History, config: object) -> int:
    from ctld.sim.swf_export import write

    cluster = getattr(config, "cluster_name", "")
    nodes = getattr(config, "nodes", ())
    procs = sum(n.cpus * len(n.names) for n in nodes)
    with open(path, "w", encoding="ascii") as out:
        count = write(history, out, cluster, procs)
    print(f"{PROG}: wrote {count} jobs to {path} (users, accounts, job names and QOS anonymised)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(1)
