"""Run corral's benchmarks and print their tables (Markdown), beside real Slurm's figures.

    .venv/bin/python bench/run_all.py                  # every phase, modest defaults
    .venv/bin/python bench/run_all.py --quick          # smoke run, well under a minute
    .venv/bin/python bench/run_all.py --phases cli,queue
    .venv/bin/python bench/run_all.py --phases profile # py-spy / cProfile hot spots
    .venv/bin/python bench/run_all.py --phases restarts  # noded / ctld restarted under jobs

Each phase starts its own LocalCluster in a private temp dir (set CORRAL_BENCH_KEEP=1
to keep them) and writes bench/results/<phase>-<stamp>.json; the whole run's tables
also go to bench/results/run-<stamp>.md. Benchmarks, not tests: nothing here fails on
a slow figure.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, PhaseResult, log, save_result

PHASES: dict[str, str] = {
    "cli": "bench.cli_startup",
    "submit": "bench.submit_throughput",
    "latency": "bench.latency",
    "e2e": "bench.e2e_throughput",
    "queue": "bench.queue_scale",
    "srun": "bench.srun_bench",
    "profile": "bench.profile_hotspots",
    "auth": "bench.auth_cost",
    "attacker": "bench.local_attacker",
    "containers": "bench.containers",
    "restarts": "bench.daemon_restarts",
}
DEFAULT = ["cli", "submit", "latency", "e2e", "queue", "srun"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--phases",
        default=",".join(DEFAULT),
        help=f"comma-separated, from {', '.join(PHASES)} (default: {','.join(DEFAULT)}; "
        "'all': every phase, profile included)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples, smaller runs")
    args = parser.parse_args(argv)
    names = list(PHASES) if args.phases == "all" else [p.strip() for p in args.phases.split(",")]
    unknown = [n for n in names if n not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s): {', '.join(unknown)}")

    stamp = time.strftime("%Y%m%d-%H%M%S")
    t_all = time.monotonic()
    rendered: list[str] = [
        f"# corral bench {stamp}{' (quick)' if args.quick else ''}\n",
        "Machine: 2 cores, shared; reference figures are real Slurm 22.05 on this machine "
        "(/work/shared/anchors/slurm/README.md).\n",
    ]
    failed = []
    for name in names:
        module = importlib.import_module(PHASES[name])
        log(f"phase {name}")
        t0 = time.monotonic()
        try:
            result: PhaseResult = module.run(args.quick)
        except Exception:
            failed.append(name)
            text = f"## {name}\n\nphase failed:\n\n```\n{traceback.format_exc()}```\n"
            print(text, flush=True)
            rendered.append(text)
            continue
        result.elapsed_s = time.monotonic() - t0
        text = result.render()
        print(text, flush=True)
        rendered.append(text)
        save_result(result, stamp)
        log(f"phase {name}: {result.elapsed_s:.1f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    md = RESULTS / f"run-{stamp}.md"
    md.write_text("\n".join(rendered))
    log(f"all phases: {time.monotonic() - t_all:.1f} s; tables in {md}")
    if failed:
        log(f"failed phases: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
