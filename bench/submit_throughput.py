"""Phase 2, submit throughput: held jobs per second through each way in.

* gRPC (grpc.aio ``ControllerStub.SubmitJob`` over one channel) with 1, 16 and 64
  calls in flight;
* the HTTP JSON gateway (``corral.api.HttpController``, one connection per call), sequential;
* the ``sbatch -H`` command with 1, 2 and 4 parallel submitters.

Every job is held (``hold=True`` / ``-H``), so the scheduler never runs one. Between
runs the queue is cancelled empty, so each run starts from an empty queue. The
group-commit ratio (store requests per SQLite transaction) comes from the counters
ctld's store keeps, read through bench/ctld_probe.py.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import (
    ANCHORS,
    FLOOR,
    SLURM,
    VENV_BIN,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    cancel_all,
    group_commit,
    log,
    ms,
    phase_main,
    rate,
    ratio_text,
    run_cmd,
    submit_grpc_sync,
    summary,
)


def _reset(cluster: BenchCluster) -> None:
    cancel_all(cluster)
    time.sleep(0.2)


def grpc_runs(cluster: BenchCluster, table: Table, data: dict[str, Any], quick: bool) -> None:
    plan = [(1, 100 if quick else 500), (16, 200 if quick else 1000), (64, 200 if quick else 1000)]
    refs = {1: (FLOOR, ANCHORS["grpc_seq"] + " (round trips)"), 16: (FLOOR, ANCHORS["grpc_16"])}
    for concurrency, n in plan:
        _reset(cluster)
        before = cluster.store_stats()
        log(f"submit: gRPC {n} jobs, {concurrency} in flight")
        run = submit_grpc_sync(cluster, n, concurrency, hold=True)
        time.sleep(0.05)
        gc = group_commit(before, cluster.store_stats())
        lat = summary(run.latencies_s)
        ref_name, ref = refs.get(concurrency, ("", "n/a"))
        table.add(
            f"gRPC SubmitJob, {concurrency} in flight",
            n,
            f"{run.jobs_per_s:.0f}",
            ms(lat.get("median")),
            ms(lat.get("p95")),
            ratio_text(gc),
            run.errors,
            f"{ref_name}: {ref}" if ref_name else ref,
        )
        data[f"grpc_{concurrency}"] = {
            "n": n,
            "jobs_per_s": run.jobs_per_s,
            "elapsed_s": run.elapsed_s,
            "latency": lat,
            "errors": run.errors,
            "group_commit": gc,
        }


def http_run(cluster: BenchCluster, table: Table, data: dict[str, Any], quick: bool) -> None:
    n = 100 if quick else 300
    _reset(cluster)
    client = cluster.client()
    spec = {
        "spec": {
            "name": "bench",
            "script": "#!/bin/sh\ntrue\n",
            "workDir": str(cluster.work_dir),
            "stdoutPattern": "/dev/null",
            "hold": True,
        }
    }
    before = cluster.store_stats()
    log(f"submit: HTTP gateway {n} jobs, sequential")
    lat = []
    t0 = time.perf_counter()
    for _ in range(n):
        t1 = time.perf_counter()
        client.submit_job(spec)
        lat.append(time.perf_counter() - t1)
    elapsed = time.perf_counter() - t0
    gc = group_commit(before, cluster.store_stats())
    s = summary(lat)
    table.add(
        "HTTP gateway (corral.api.HttpController), sequential",
        n,
        f"{rate(n, elapsed):.0f}",
        ms(s["median"]),
        ms(s["p95"]),
        ratio_text(gc),
        0,
        "n/a",
    )
    data["http_seq"] = {
        "n": n,
        "jobs_per_s": rate(n, elapsed),
        "elapsed_s": elapsed,
        "latency": s,
        "group_commit": gc,
    }


def sbatch_runs(cluster: BenchCluster, table: Table, data: dict[str, Any], quick: bool) -> None:
    env = cluster.env()
    cwd = str(cluster.work_dir)
    argv = [str(VENV_BIN / "sbatch"), "-H", "-o", "/dev/null", "--wrap", "true"]
    per_submitter = 10 if quick else 50
    for submitters in (1, 2, 4):
        _reset(cluster)
        n = per_submitter * submitters
        before = cluster.store_stats()
        log(f"submit: sbatch -H, {submitters} submitters x {per_submitter}")
        failures = [0]

        def one_submitter(_: int, failures: list[int] = failures) -> list[float]:
            out = []
            for _ in range(per_submitter):
                dt, proc = run_cmd(argv, env, cwd)
                if proc.returncode != 0:
                    failures[0] += 1
                out.append(dt)
            return out

        t0 = time.perf_counter()
        with ThreadPoolExecutor(submitters) as pool:
            lat = [x for chunk in pool.map(one_submitter, range(submitters)) for x in chunk]
        elapsed = time.perf_counter() - t0
        gc = group_commit(before, cluster.store_stats())
        s = summary(lat)
        table.add(
            f"sbatch -H, {submitters} parallel submitter{'s' if submitters > 1 else ''}",
            n,
            f"{rate(n - failures[0], elapsed):.0f}",
            ms(s["median"]),
            ms(s["p95"]),
            ratio_text(gc),
            failures[0],
            f"{SLURM}: {ANCHORS[f'sbatch_held_{submitters}']}",
        )
        data[f"sbatch_{submitters}"] = {
            "n": n,
            "jobs_per_s": rate(n - failures[0], elapsed),
            "elapsed_s": elapsed,
            "latency": s,
            "failures": failures[0],
            "group_commit": gc,
        }


def run(quick: bool = False) -> PhaseResult:
    result = PhaseResult(
        "submit_throughput",
        {"cluster": "2 nodes x 16 CPUs", "jobs": "held", "store": "SQLite, synchronous=FULL"},
    )
    table = Table(
        "Submit throughput (held jobs)",
        [
            "path",
            "jobs",
            "jobs/s",
            "call p50",
            "call p95",
            "requests per commit",
            "errors",
            "reference",
        ],
    )
    table.notes.append(
        "requests per commit: store commit requests / SQLite transactions during the run "
        "(ctld's Store.requests/Store.commits, read via bench/ctld_probe.py)"
    )
    table.notes.append(f"{FLOOR}: SQLite WAL one row per commit {ANCHORS['sqlite_full']}")
    with bench_cluster("submit") as cluster:
        grpc_runs(cluster, table, result.data, quick)
        http_run(cluster, table, result.data, quick)
        sbatch_runs(cluster, table, result.data, quick)
        result.data["ctld_rss_mib_end"] = cluster.rss_mib()
    result.tables.append(table)
    return result


if __name__ == "__main__":
    phase_main(run)
