"""Phase 5, queue scale: squeue, sinfo and ctld's memory with many pending jobs.

The queue is filled with held jobs over gRPC (64 in flight) to each level; at each
level ``squeue``, ``squeue -h -o "%i %T"`` and ``sinfo`` are timed (median of 5, after
a warm-up), GetJobs over the HTTP gateway is timed in this process (the server's and
the wire's share of squeue), and ctld's RSS is read with psutil.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import (
    ANCHORS,
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
    submit_grpc_sync,
    summary,
)

RUNS = 5


def time_command(cluster: BenchCluster, argv: list[str], runs: int) -> tuple[str, dict[str, Any]]:
    missing = command_missing(argv[0])
    if missing:
        return missing, {"missing": True}
    env = cluster.env()
    cwd = str(cluster.work_dir)
    samples = []
    out_lines = 0
    for i in range(runs + 1):
        dt, proc = run_cmd([str(VENV_BIN / argv[0]), *argv[1:]], env, cwd)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            return f"error (rc={proc.returncode}: {tail[0][:80]})", {"error": tail[0]}
        out_lines = proc.stdout.count("\n")
        if i:
            samples.append(dt)
    s = summary(samples)
    return ms(s["median"]), {**s, "samples_s": samples, "output_lines": out_lines}


def time_getjobs(cluster: BenchCluster, runs: int) -> dict[str, Any]:
    client = cluster.client()
    samples = []
    size = 0
    for i in range(runs + 1):
        t0 = time.perf_counter()
        reply = client.get_jobs({})
        dt = time.perf_counter() - t0
        size = len(reply.get("jobs", []))
        if i:
            samples.append(dt)
    body = len(json.dumps(reply, separators=(",", ":")))
    return {**summary(samples), "jobs": size, "bytes": body}


def run(quick: bool = False) -> PhaseResult:
    levels = [0, 1000] if quick else [0, 1000, 5000]
    runs = 3 if quick else RUNS
    result = PhaseResult(
        "queue_scale", {"levels": levels, "runs": runs, "cluster": "2 nodes x 16 CPUs"}
    )
    table = Table(
        "Queue scale: pending (held) jobs",
        ["pending", "figure", "corral", SLURM],
    )
    refs = {
        ("squeue", 0): ANCHORS["squeue_0"],
        ("squeue", 1000): ANCHORS["squeue_1000"],
        ("squeue", 5000): ANCHORS["squeue_5000"],
        ("sinfo", 5000): ANCHORS["sinfo_5000"],
        ("rss", 0): ANCHORS["rss_0"],
        ("rss", 1000): ANCHORS["rss_1000"],
        ("rss", 5000): ANCHORS["rss_5000"],
    }
    with bench_cluster("queue") as cluster:
        have = 0
        for level in levels:
            if level > have:
                log(f"queue: filling to {level} held jobs")
                sub = submit_grpc_sync(cluster, level - have, 64, hold=True, name="held")
                have += len(sub.job_ids)
                time.sleep(0.5)  # let the scheduling passes the submits woke finish
            log(f"queue: measuring at {have} pending")
            row: dict[str, Any] = {"pending": have}
            for key, argv in (
                ("squeue", ["squeue"]),
                ('squeue -h -o "%i %T"', ["squeue", "-h", "-o", "%i %T"]),
                ("sinfo", ["sinfo"]),
            ):
                text, data = time_command(cluster, argv, runs)
                row[key] = data
                table.add(level, f"`{key}` median", text, refs.get((key, level), "n/a"))
            gj = time_getjobs(cluster, runs)
            row["getjobs_http"] = gj
            table.add(
                level,
                "GetJobs over HTTP (in-process client)",
                f"{ms(gj.get('median'))} ({gj['bytes'] / 1024:.0f} KiB of JSON)",
                "n/a",
            )
            rss = cluster.rss_mib()
            row["ctld_rss_mib"] = rss
            table.add(level, "ctld RSS", f"{rss:.0f} MiB", refs.get(("rss", level), "n/a"))
            result.data[str(level)] = row
    table.notes.append(
        "GetJobs over HTTP: the whole queue as proto3 JSON, one call from this process "
        "(what squeue pays before it formats anything)"
    )
    result.tables.append(table)
    return result


if __name__ == "__main__":
    phase_main(run)
