"""One scheduling pass at scale: 1,000 nodes of 8 GPUs, half busy, 10k / 100k pending.

Times the pure core (``ctld.sched.schedule``) on a fixed random snapshot of mixed
shapes (1-8 GPUs, some 2-4 node jobs, limits from 10 minutes to a day), reports the
median of several passes and the peak memory of one (tracemalloc), and with
``--profile`` the ten functions where a pass spends its time.

    .venv/bin/python bench/sched_pass.py [--pending 10000 100000] [--full] [--profile]
        [--settings ctld|core]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import random
import statistics
import sys
import time
import tracemalloc

from corral.config import SchedulerConfig
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
    schedule,
)

NODES = 1000
GPUS = 8
CPUS = 64
MEM = 512 * 1024


def make_snapshot(pending: int, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    nodes, running = [], []
    job_id = 10_000_000
    for i in range(NODES):
        name = f"n{i:04d}"
        used = rng.choice([0, 8, 4, 2, 6]) if i % 2 == 0 else 0  # half the cluster busy
        if used:
            job_id += 1
            running.append(
                RunningView(
                    job_id,
                    float(rng.randint(60, 86400)),
                    (Placement(name, used * 8, used * 32 * 1024, tuple(range(used))),),
                )
            )
        nodes.append(
            NodeView(
                name,
                CPUS,
                MEM,
                GPUS,
                CPUS - used * 8,
                MEM - used * 32 * 1024,
                tuple(range(used, GPUS)),
                idle=not used,
            )
        )
    jobs = []
    for j in range(1, pending + 1):
        multi = rng.random() < 0.1
        gpus = 8 if multi else rng.choice([1, 1, 2, 4, 8])
        jobs.append(
            JobRequest(
                j,
                ("gpu",),
                nodes_min=rng.randint(2, 4) if multi else 1,
                cpus_per_task=gpus * 4,
                mem_per_node_mb=gpus * 16 * 1024,
                gpus_per_node=gpus,
                time_limit_s=rng.choice([600, 3600, 4 * 3600, 86400]),
                priority=pending - j,
            )
        )
    return Snapshot(
        1,
        0.0,
        tuple(nodes),
        (PartitionView("gpu", tuple(n.name for n in nodes)),),
        tuple(jobs),
        tuple(running),
    )


def make_full_snapshot(pending: int) -> Snapshot:
    """bench/scale.py's steady state: every node runs one 8-GPU job for a day, every
    pending job wants 8 GPUs, so nothing starts and the pass is reasons and forecasts."""
    nodes, running = [], []
    for i in range(NODES):
        name = f"n{i:04d}"
        gpus = tuple(range(GPUS))
        running.append(RunningView(10_000_000 + i, 86400.0, (Placement(name, 1, 1024, gpus),)))
        nodes.append(NodeView(name, CPUS, MEM, GPUS, CPUS - 1, MEM - 1024, (), idle=False))
    jobs = tuple(
        JobRequest(j, ("gpu",), gpus_per_node=GPUS, time_limit_s=3600, priority=pending - j)
        for j in range(1, pending + 1)
    )
    part = PartitionView("gpu", tuple(n.name for n in nodes))
    return Snapshot(1, 0.0, tuple(nodes), (part,), jobs, tuple(running))


FULL = False
SETTINGS = Settings()


def ctld_settings() -> Settings:
    """What ctld runs when its config says nothing about [scheduler]."""
    sc = SchedulerConfig()
    return Settings(
        backfill=sc.backfill,
        reserve_depth=sc.reserve_depth,
        forecast_depth=sc.forecast_depth,
        placement=sc.placement,
        predict=sc.predict,
        backfill_order=sc.backfill_order,
        max_job_test=sc.max_job_test,
        stack_forecasts=sc.stack_forecasts,
    )


def measure(pending: int, repeats: int) -> tuple[float, float, float, int, int]:
    snap = make_full_snapshot(pending) if FULL else make_snapshot(pending)
    snap = dataclasses.replace(snap, settings=SETTINGS)
    times, cpu = [], []
    plan = None
    for _ in range(repeats):
        began, began_cpu = time.perf_counter(), time.thread_time()
        plan = schedule(snap)
        times.append(time.perf_counter() - began)
        cpu.append(time.thread_time() - began_cpu)
    tracemalloc.start()
    schedule(snap)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert plan is not None
    return (
        statistics.median(times),
        statistics.median(cpu),
        peak / 2**20,
        len(plan.starts),
        len(plan.forecasts),
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--full", action="store_true", help="every node busy, 8-GPU jobs pending")
    ap.add_argument(
        "--settings",
        choices=["ctld", "core"],
        default="ctld",
        help="ctld's default [scheduler] (predictions, shortest first, max_job_test) "
        "or the core's own defaults (priority order, limits)",
    )
    args = ap.parse_args(argv)
    global FULL, SETTINGS
    FULL = args.full
    SETTINGS = ctld_settings() if args.settings == "ctld" else Settings()
    busy = "all busy" if FULL else "half busy"
    print(f"{NODES} nodes x {GPUS} GPUs, {busy}; target: < 100 ms at 10k, << 1 s at 100k\n")
    print("| pending | median pass ms (CPU ms) | peak MiB (tracemalloc) | started | forecasts |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.pending:
        repeats = args.repeats if n <= 20_000 else max(1, args.repeats // 2)
        median, cpu, peak, starts, forecasts = measure(n, repeats)
        print(
            f"| {n:,} | {median * 1000:.1f} ({cpu * 1000:.1f}) | {peak:.1f} | {starts} "
            f"| {forecasts} |",
            flush=True,
        )
    if args.profile:
        snap = make_full_snapshot(args.pending[0]) if FULL else make_snapshot(args.pending[0])
        snap = dataclasses.replace(snap, settings=SETTINGS)
        prof = cProfile.Profile()
        prof.enable()
        schedule(snap)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
