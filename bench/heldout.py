"""The SWF traces in halves: each trace's months split at the middle of its submit span,
each half replayed on its own (an empty machine at its start) under EASY, our EASY++
and ctld's default, with the figures PUBLISHED.md uses.

The first half is where a change may be tuned; the second half is held out: a change
is judged on the second halves of all the traces, never tuned on them. ``--jobs N``
replays the first N jobs of each half (0: the whole half), for traces too big to
replay whole on a small machine. The replay choices are corral sim's
(docs/simulator.md, "What it models"): one pool of MaxProcs processors, the user's
estimate as the limit, a job killed at it, the first 1% of finished jobs left out.

    nice -n 19 .venv/bin/python -m bench.heldout --jobs 5000
    nice -n 19 .venv/bin/python -m bench.heldout --trace KTH-SP2 --jobs 0
    nice -n 19 .venv/bin/python -m bench.heldout --half 1 --policy corral \\
        --set starve_after_s=43200     # a variant of the default, to tune on first halves
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ctld.sched import Settings
from ctld.sim import swf
from ctld.sim.engine import POLICIES, Policy, replay
from ctld.sim.metrics import summarize

SWF = Path(__file__).resolve().parents[2] / "shared/traces/swf"
# (file, machine size: 0 for the header's). CTC-SP2 at 512, as Tsafrir et al. and the
# tables of docs/simulator.md replay it
TRACES = {
    "KTH-SP2": ("KTH-SP2-1996-2.1-cln.swf.gz", 0),
    "SDSC-SP2": ("SDSC-SP2-1998-4.2-cln.swf.gz", 0),
    "CTC-SP2": ("CTC-SP2-1996-3.1-cln.swf.gz", 512),
    "SDSC-BLUE": ("SDSC-BLUE-2000-4.2-cln.swf.gz", 0),
    "LANL-CM5": ("LANL-CM5-1994-4.1-cln.swf.gz", 0),
    "CEA-Curie": ("CEA-Curie-2011-2.1-cln.swf.gz", 0),
}


def halves(jobs: tuple[swf.TraceJob, ...]) -> tuple[tuple[swf.TraceJob, ...], ...]:
    """The jobs submitted before the middle of the trace's submit span, and the rest."""
    middle = (jobs[0].submit + jobs[-1].submit) / 2
    first = tuple(j for j in jobs if j.submit < middle)
    return first, jobs[len(first) :]


def with_settings(pol: Policy, assignments: list[str]) -> Policy:
    """``pol`` with the ``NAME=VALUE`` assignments made to its scheduler Settings (a
    bench-only way to try a variant of ctld's default; ctld's config is untouched)."""
    # the declared types (strings: the model module uses postponed annotations)
    scalars: dict[object, type] = {"bool": bool, "int": int, "float": float, "str": str}
    kinds = {f.name: scalars.get(f.type) for f in fields(Settings)}
    changed: dict[str, Any] = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        kind = kinds.get(name)
        if not sep or kind is None:
            raise SystemExit(f"heldout: --set {item!r}: not NAME=VALUE of a Settings field")
        if kind is bool:
            if value.lower() not in ("true", "false"):
                raise SystemExit(f"heldout: --set {item!r}: {name} is true or false")
            changed[name] = value.lower() == "true"
            continue
        try:
            changed[name] = kind(value)
        except ValueError:
            raise SystemExit(f"heldout: --set {item!r}: {name} is a {kind.__name__}") from None
    return replace(pol, settings=replace(pol.settings, **changed))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", choices=sorted(TRACES), help="repeatable")
    ap.add_argument("--half", type=int, action="append", choices=(1, 2), help="repeatable")
    ap.add_argument("--jobs", type=int, default=5000, help="the first N jobs of a half (0: all)")
    ap.add_argument(
        "--policy", action="append", choices=sorted(POLICIES), help="default: easy, easy++, corral"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="repeatable: a Settings field of the corral policies (e.g. starve_after_s=43200)",
    )
    ap.add_argument("--dir", type=Path, default=SWF)
    args = ap.parse_args(argv)
    policies = args.policy or ["easy", "easy++", "corral"]
    with_settings(POLICIES["corral"], args.set)  # bad --set: said before any replay
    print(
        "| trace | half | jobs | policy | utilization | mean bsld | mean wait min "
        "| max wait h | CPU s |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for name in args.trace or list(TRACES):
        file, procs_given = TRACES[name]
        trace = swf.load(args.dir / file)
        procs = procs_given or trace.max_procs
        for half in args.half or [1, 2]:
            jobs = halves(trace.jobs)[half - 1]
            if args.jobs:
                jobs = jobs[: args.jobs]
            jobs = tuple(j for j in jobs if j.procs <= procs)
            for policy in policies:
                t0 = time.process_time()
                pol = POLICIES[policy]
                if policy.startswith("corral"):
                    pol = with_settings(pol, args.set)
                s = summarize(replay(jobs, procs, pol))
                spent = time.process_time() - t0
                print(
                    f"| {name} | {half} | {len(jobs)} | {label(policy, args.set)} | "
                    f"{s.utilization:.3f} | "
                    f"{s.bsld_mean:.2f} | {s.wait_mean_s / 60:.1f} | "
                    f"{s.wait_max_s / 3600:.1f} | {spent:.0f} |",
                    flush=True,
                )
    return 0


def label(policy: str, assignments: list[str]) -> str:
    return (
        f"{policy} {' '.join(assignments)}"
        if assignments and policy.startswith("corral")
        else policy
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
