"""CPU time (user + system of the child) of the commands, against the interpreter's floor.

On a shared, loaded machine wall times lie; the CPU a command burns does not (much).
Two tables: each command's import alone (``python -c "import client.X"``), and each
command run against a fresh bench cluster with a small answer. Runs are interleaved, so
load hits every row alike; ``--before DIR`` adds a column for another venv's bin/ (say
the main checkout's, to measure a change). Run with ``PYTHONDONTWRITEBYTECODE`` unset::

    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m bench.cmd_cpu --runs 30 \\
        --before /work/main/.venv/bin
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from collections.abc import Callable

from bench.common import VENV_BIN, bench_cluster

IMPORTS = ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun"]


def cpu_ms(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> float:
    """User + system CPU of one run of ``argv`` as a child (output discarded)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            if cwd:
                os.chdir(cwd)
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.execve(argv[0], argv, env if env is not None else dict(os.environ))
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        raise RuntimeError(f"{argv} exited with status {status}")
    return (usage.ru_utime + usage.ru_stime) * 1000


def table(
    title: str,
    rows: dict[str, Callable[[str], list[str]]],
    bins: dict[str, str],
    runs: int,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> None:
    for make in rows.values():  # warm: bytecode and page cache
        for b in bins.values():
            cpu_ms(make(b), env, cwd)
    medians: dict[str, dict[str, float]] = {}
    for name, make in rows.items():
        samples: dict[str, list[float]] = {k: [] for k in bins}
        for _ in range(runs):
            for k, b in bins.items():
                samples[k].append(cpu_ms(make(b), env, cwd))
        medians[name] = {k: statistics.median(v) for k, v in samples.items()}
    floor = medians["python -c pass"]
    print(f"\n{title} (median CPU of {runs} runs)\n")
    print("| command | " + " | ".join(bins) + " |")
    print("|---|" + "---|" * len(bins))
    for name, by_bin in medians.items():
        cells = [f"{ms:.1f} ms ({ms / floor[k]:.2f}x)" for k, ms in by_bin.items()]
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--before", default="", help="another venv's bin/ to compare with")
    args = parser.parse_args()
    bins = {"this tree": str(VENV_BIN)}
    if args.before:
        bins = {"before": args.before, **bins}
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

    imports: dict[str, Callable[[str], list[str]]] = {
        "python -c pass": lambda b: [f"{b}/python", "-c", "pass"]
    }
    for command in IMPORTS:
        imports[f"import client.{command}"] = lambda b, c=command: [
            f"{b}/python",
            "-c",
            f"import client.{c}",
        ]
    table("Import alone", imports, bins, args.runs)

    with bench_cluster("cmd-cpu", nodes=1) as cluster:
        env = cluster.env()
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cwd = str(cluster.work_dir)
        n = args.runs * len(bins) + len(bins)

        def sbatch(*argv: str) -> str:
            out = subprocess.run(
                [str(VENV_BIN / "sbatch"), "-H", "--parsable", *argv, "--wrap", "true"],
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip()

        array = sbatch(f"--array=0-{n}")
        held = iter(f"{array}_{i}" for i in range(n + 1))
        one = sbatch()
        commands: dict[str, Callable[[str], list[str]]] = {
            "python -c pass": lambda b: [f"{b}/python", "-c", "pass"],
            "sbatch -H --wrap true": lambda b: [f"{b}/sbatch", "-H", "--wrap", "true"],
            "squeue -t R (idle)": lambda b: [f"{b}/squeue", "-t", "R"],
            "scancel <held id>": lambda b: [f"{b}/scancel", next(held)],
            "sinfo": lambda b: [f"{b}/sinfo"],
            "sacct -j <id>": lambda b: [f"{b}/sacct", "-j", one],
        }
        table("Commands against a bench cluster", commands, bins, args.runs, env, cwd)


if __name__ == "__main__":
    main()
