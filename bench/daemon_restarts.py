"""Daemon restarts under running jobs (issue 35): noded's take-over, ctld's return.

    .venv/bin/python -m bench.daemon_restarts                       # both parts (~4 min)
    .venv/bin/python -m bench.daemon_restarts --quick               # a trial (~2 min)
    .venv/bin/python -m bench.daemon_restarts --part noded --jobs 1,8,32 --rounds 9
    .venv/bin/python -m bench.daemon_restarts --part ctld --nodes 1000 --away 90
    .venv/bin/python -m bench.daemon_restarts --part ctld --interval 10 --timeout 60
    .venv/bin/python bench/run_all.py --phases restarts

noded (bench/noded_takeover.py): a local cluster of real noded processes, N batch jobs
and an srun step on one node; that noded is SIGKILLed and started again, and the time
from its spawn to its registration, its first heartbeat with every job's usage and
srun's stream resumed is measured, with where it goes (noded's log lines, the
interpreter's and imports' floors). ctld (bench/ctld_return.py): 1,000 simulated nodes
running jobs, ctld stopped (SIGTERM) and killed (SIGKILL), away for three heartbeat
timeouts, started again: start to ready, ready to every node back with its jobs, ctld's
CPU, requeues and jobs lost. Benchmarks, not tests: nothing fails on a slow figure
(a requeue or a lost job is printed, and would be a bug).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import ctld_return, noded_takeover
from bench.common import PYTHON, PhaseResult, log, save_result

VARIANTS = ["SIGTERM", "SIGKILL"]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def run_noded(result: PhaseResult, levels: list[int], rounds: int) -> None:
    found, info = noded_takeover.measure(levels, rounds)
    result.tables += noded_takeover.tables(found, info)
    result.data["noded"] = {
        "rounds": [{"jobs": r.jobs, "times": r.times, "checks": r.checks} for r in found],
        **info,
    }


def run_ctld(
    result: PhaseResult,
    nodes: int,
    jobs_per_node: int,
    interval_s: float,
    timeout_s: float,
    away_s: float,
) -> None:
    found, info = ctld_return.measure(nodes, jobs_per_node, interval_s, timeout_s, away_s, VARIANTS)
    result.tables += ctld_return.tables(found, nodes, interval_s, timeout_s, info)
    result.data["ctld"] = {"outages": [o.__dict__ for o in found], **info}


def run(quick: bool) -> PhaseResult:
    """run_all's phase: both parts at their defaults (``quick``: fewer rounds, 300 nodes)."""
    result = PhaseResult("restarts", {"quick": quick, "python": PYTHON})
    run_noded(result, [1, 8] if quick else [1, 8, 32], 2 if quick else 5)
    run_ctld(result, 300 if quick else 1000, 1, 2.0, 10.0, 30.0)
    return result


def main() -> None:
    # a TERM (timeout, Ctrl-C in a wrapper) still stops the clusters it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["both", "noded", "ctld"], default="both")
    p.add_argument("--jobs", default="1,8,32", help="batch jobs on the restarted node")
    p.add_argument("--rounds", type=int, default=5, help="noded restarts per job count")
    p.add_argument("--nodes", type=int, default=1000, help="simulated nodes (ctld part)")
    p.add_argument("--jobs-per-node", type=int, default=1, choices=[1, 2, 4, 8])
    p.add_argument("--interval", type=float, default=2.0, help="heartbeat.interval_s")
    p.add_argument("--timeout", type=float, default=10.0, help="heartbeat.timeout_s")
    p.add_argument("--away", type=float, default=0.0, help="s (default: 3 x --timeout)")
    p.add_argument("--quick", action="store_true", help="1 and 8 jobs, 2 rounds, 300 nodes")
    args = p.parse_args()
    if args.timeout <= 3 * args.interval:
        p.error("--timeout must be over 3 x --interval (docs/reliability.md)")
    levels = [1, 8] if args.quick else _ints(args.jobs)
    rounds = 2 if args.quick else args.rounds
    nodes = 300 if args.quick else args.nodes
    away = args.away or 3 * args.timeout
    result = PhaseResult(
        "restarts",
        {
            "part": args.part,
            "jobs": levels,
            "rounds": rounds,
            "nodes": nodes,
            "jobs_per_node": args.jobs_per_node,
            "heartbeat": f"{args.interval:g} s / {args.timeout:g} s",
            "away_s": away,
            "python": PYTHON,
        },
    )
    t0 = time.monotonic()
    if args.part in ("both", "noded"):
        run_noded(result, levels, rounds)
        save_result(result)  # kept if the ctld part fails
    if args.part in ("both", "ctld"):
        run_ctld(result, nodes, args.jobs_per_node, args.interval, args.timeout, away)
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)}")


if __name__ == "__main__":
    main()
