"""Phase 1, CLI start-up: wall time of each command against a running cluster.

Each command is the console script in .venv/bin, run as a fresh process (what a user
pays per call), with a warm-up run first. ``scancel`` gets a different pending (held)
job each run; ``sacct -j`` asks for one completed job. The ``-X importtime`` table
shows where ``sbatch`` spends its start-up.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from bench.common import (
    ANCHORS,
    FLOOR,
    PYTHON,
    SLURM,
    VENV_BIN,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    command_missing,
    log,
    ms,
    phase_main,
    run_cmd,
    summary,
)

TARGET_S = 0.060


def _time_runs(
    argv_for: Callable[[int], list[str]],
    env: dict[str, str],
    cwd: str,
    runs: int,
    warmup: int = 1,
) -> tuple[list[float], str | None]:
    samples: list[float] = []
    for i in range(warmup + runs):
        dt, proc = run_cmd(argv_for(i), env, cwd)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            return samples, f"error (rc={proc.returncode}: {tail[0][:100]})"
        if i >= warmup:
            samples.append(dt)
    return samples, None


def parse_importtime(stderr: str) -> list[dict[str, Any]]:
    """``-X importtime`` lines as {module, self_us, cumulative_us, depth}."""
    out = []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if m:
            out.append(
                {
                    "module": m.group(4),
                    "self_us": int(m.group(1)),
                    "cumulative_us": int(m.group(2)),
                    "depth": (len(m.group(3)) - 1) // 2,
                }
            )
    return out


def importtime_tables(cluster: BenchCluster, runs: int = 3) -> tuple[list[Table], dict[str, Any]]:
    """Top imports of ``sbatch --wrap true`` (-X importtime), the run with the median total."""
    env = cluster.env()
    argv = [PYTHON, "-X", "importtime", str(VENV_BIN / "sbatch"), "-H", "--wrap", "true"]
    parsed_runs = []
    for _ in range(runs + 1):
        dt, proc = run_cmd(argv, env, str(cluster.work_dir))
        rows = parse_importtime(proc.stderr)
        parsed_runs.append((sum(r["self_us"] for r in rows), dt, rows))
    parsed_runs = sorted(parsed_runs[1:], key=lambda r: r[0])  # drop the cold first run
    total_us, wall, rows = parsed_runs[len(parsed_runs) // 2]

    top = Table(
        "sbatch start-up: top-level imports by cumulative time (python -X importtime)",
        ["module (top level)", "cumulative", "share of all imports"],
    )
    for r in sorted((r for r in rows if r["depth"] == 0), key=lambda r: -r["cumulative_us"])[:12]:
        top.add(
            r["module"],
            f"{r['cumulative_us'] / 1000:.1f} ms",
            f"{r['cumulative_us'] / total_us:.0%}",
        )
    top.notes.append(
        f"all imports: {total_us / 1000:.1f} ms of {wall * 1000:.1f} ms wall "
        f"(-X importtime itself adds overhead); {len(rows)} modules imported"
    )
    heavy = Table(
        "sbatch start-up: modules with the most self time",
        ["module", "self", "cumulative", "depth"],
    )
    for r in sorted(rows, key=lambda r: -r["self_us"])[:12]:
        heavy.add(
            r["module"],
            f"{r['self_us'] / 1000:.2f} ms",
            f"{r['cumulative_us'] / 1000:.1f} ms",
            r["depth"],
        )
    data = {"total_import_us": total_us, "wall_s": wall, "modules": rows}
    return [top, heavy], data


def breakdown(cluster: BenchCluster, runs: int, data: dict[str, Any]) -> Table:
    """Where one ``sbatch --wrap true`` goes: interpreter, imports, the RPC, the rest.

    The four measurements are interleaved run by run, so that the load of the shared
    machine hits them alike; the parts are differences of their medians."""
    import os
    import statistics

    env = cluster.env()
    cwd = str(cluster.work_dir)
    client = cluster.client()
    spec = {
        "name": "wrap",
        "script": "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n",
        "workDir": cwd,
        "environment": dict(os.environ),
        "export": "ALL",
        "submitLine": "sbatch --wrap true",
    }
    samples: dict[str, list[float]] = {"pass": [], "import": [], "sbatch": [], "rpc": []}
    argvs = {
        "pass": [PYTHON, "-c", "pass"],
        "import": [PYTHON, "-c", "import client.sbatch"],
        "sbatch": [str(VENV_BIN / "sbatch"), "--wrap", "true"],
    }
    for i in range(runs + 1):
        for key, argv in argvs.items():
            dt, proc = run_cmd(argv, env, cwd)
            if proc.returncode == 0 and i:
                samples[key].append(dt)
        t0 = time.perf_counter()
        client.submit_job({"spec": spec})
        if i:
            samples["rpc"].append(time.perf_counter() - t0)
    table = Table(
        f"sbatch --wrap true: where the wall time goes (medians of {runs} interleaved runs)",
        ["part", "time", "how measured"],
    )
    if not all(samples.values()):
        table.add("n/a", "", "a command failed")
        return table
    med = {k: statistics.median(v) for k, v in samples.items()}
    python_s = med["pass"]
    import_s = med["import"] - med["pass"]
    rpc_s = med["rpc"]
    rest_s = med["sbatch"] - med["import"] - rpc_s
    table.add("interpreter start (python3 -c pass)", ms(python_s), "fresh process")
    table.add(
        "imports (python3 -c 'import client.sbatch' minus the above)", ms(import_s), "fresh process"
    )
    table.add(
        "SubmitJob over the HTTP gateway", ms(rpc_s), "corral.api.HttpController in this process"
    )
    table.add("the rest (options, script, environment, output, exit)", ms(rest_s), "difference")
    table.add("total sbatch --wrap true", ms(med["sbatch"]), "fresh process")
    data["breakdown"] = {"medians_s": med, "samples_s": samples}
    return table


def run(quick: bool = False) -> PhaseResult:
    runs = 5 if quick else 20
    result = PhaseResult("cli_startup", {"runs": runs, "warmup": 1, "cluster": "2 nodes x 16 CPUs"})
    table = Table(
        f"CLI start-up, wall time per call ({runs} runs)",
        ["command", "corral median", "corral p95", "reference", "reference figure", "< 60 ms?"],
    )
    table.notes.append(
        "fresh process per call, timed around subprocess.run; queue holds the few jobs "
        "this phase made"
    )
    with bench_cluster("cli") as cluster:
        env = cluster.env()
        cwd = str(cluster.work_dir)
        client = cluster.client()

        held: list[str] = []

        def prepare_scancel() -> None:
            for _ in range(runs + 1):
                reply = client.submit_job(
                    {
                        "spec": {
                            "name": "held",
                            "script": "#!/bin/sh\ntrue\n",
                            "workDir": cwd,
                            "hold": True,
                        }
                    },
                )
                held.append(str(reply["jobId"]))

        def sacct_id() -> str:
            reply = client.get_jobs({"filter": {"states": ["JOB_STATE_COMPLETED"]}})
            jobs = reply.get("jobs", [])
            return str(jobs[0]["jobId"]) if jobs else "1"

        sacct_job = ["1"]
        cases: list[tuple[str, str | None, Callable[[int], list[str]], str, str]] = [
            (
                "python3 -c pass (venv)",
                None,
                lambda i: [PYTHON, "-c", "pass"],
                FLOOR,
                ANCHORS["python_pass"],
            ),
            (
                "sbatch --wrap true",
                "sbatch",
                lambda i: [str(VENV_BIN / "sbatch"), "--wrap", "true"],
                SLURM,
                ANCHORS["sbatch_call"],
            ),
            (
                "squeue",
                "squeue",
                lambda i: [str(VENV_BIN / "squeue")],
                SLURM,
                ANCHORS["squeue_0"] + " (0 pending)",
            ),
            (
                "scancel <pending id>",
                "scancel",
                lambda i: [str(VENV_BIN / "scancel"), held[i]],
                SLURM,
                "n/a",
            ),
            (
                "sinfo",
                "sinfo",
                lambda i: [str(VENV_BIN / "sinfo")],
                SLURM,
                ANCHORS["sinfo_5000"] + " (5000 pending)",
            ),
            (
                "sacct -j N",
                "sacct",
                lambda i: [str(VENV_BIN / "sacct"), "-j", sacct_job[0]],
                SLURM,
                ANCHORS["sacct_j"],
            ),
        ]
        for label, command, argv_for, ref_name, ref in cases:
            missing = command_missing(command) if command else None
            if missing:
                table.add(label, missing, "", ref_name, ref, "")
                result.data[label] = {"missing": True}
                continue
            if command == "scancel":
                prepare_scancel()
            if command == "sacct":
                sacct_job[0] = sacct_id()
            log(f"cli: timing {label}")
            samples, error = _time_runs(argv_for, env, cwd, runs)
            if error:
                table.add(label, error, "", ref_name, ref, "")
                result.data[label] = {"error": error, "samples_s": samples}
                continue
            s = summary(samples)
            table.add(
                label,
                ms(s["median"]),
                ms(s["p95"]),
                ref_name,
                ref,
                "yes" if s["median"] < TARGET_S else "no",
            )
            result.data[label] = {**s, "samples_s": samples}
        result.tables.append(table)
        log("cli: sbatch breakdown")
        result.tables.append(breakdown(cluster, runs, result.data))
        log("cli: -X importtime for sbatch")
        tables, data = importtime_tables(cluster)
        result.tables.extend(tables)
        result.data["importtime_sbatch"] = data
    return result


if __name__ == "__main__":
    phase_main(run)
