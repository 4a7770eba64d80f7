"""ctld's whole scheduling pass, in process, at 1,000 nodes x 8 GPUs and a deep queue.

Where ``sched_pass.py`` times the pure core on a made-up snapshot, this drives ctld's
own Cluster (the real state, SQLite store, snapshot builder, priority refresh and plan
applier; nodes registered in process, launches recorded) into bench/scale.py's steady
state: every node runs one 8-GPU job, N 8-GPU jobs are pending. It then times, per
pass: the priority refresh (due every 30 s: forced here), the snapshot, the core, the
applier; and a pass that starts one job that fits (a 1-CPU job submitted just before).

    .venv/bin/python -m bench.ctld_pass [--pending 10000 50000] [--profile]
    .venv/bin/python -m bench.ctld_pass --quick-path [1000 12500] [--pending 10000]

``--quick-path`` (issue 29) prints the cost of a start at submit, of a pass with
nothing pending and of a pass over a deep queue against the node count (N x 8 GPUs,
half of them running an 8-GPU job for the first two, all for the last).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import schedule

NODES = 1000
GPUS = 8
CPUS = 64
USER = Identity("bench", 1000, 1000)


def _spec(gpus: int, cpus: int = 1, limit: int = 3600, hold: bool = False) -> pb.JobSpec:
    return pb.JobSpec(
        name="scale",
        script="#!/bin/sh\ntrue\n",
        work_dir="/tmp",
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        time_limit_s=limit,
        hold=hold,
    )


async def _fill(c: Cluster, pending: int) -> None:
    for _ in range(NODES):
        await c.submit(USER, _spec(GPUS, limit=86400))
    await c.schedule_pass()
    running = sum(1 for j in c.jobs.values() if j.state == js.RUNNING)
    assert running == NODES, running
    for _ in range(pending):
        await c.submit(USER, _spec(GPUS, hold=True))
    held = [j.job_id for j in c.jobs.values() if j.hold]
    for i in range(0, len(held), 5000):
        await c.update_hold(
            USER, pb.UpdateJobRequest(job_ids=held[i : i + 5000], action=pb.JOB_UPDATE_RELEASE)
        )


async def _timed_pass(c: Cluster, *, refresh: bool) -> dict[str, float]:
    sched = c.scheduler
    if refresh:
        clock = c.state.clock
        assert isinstance(clock, ManualClock)
        clock.advance(30.0)  # ages move on: every pending job's priority changes
    t0 = time.thread_time()
    sched.refresh_priorities()
    t1 = time.thread_time()
    snap = c.snapshot()
    t2 = time.thread_time()
    plan = schedule(snap)
    t3 = time.thread_time()
    await c.apply_plan(plan, pass_no=0)
    t4 = time.thread_time()
    return {
        "refresh": t1 - t0,
        "snapshot": t2 - t1,
        "plan": t3 - t2,
        "apply": t4 - t3,
        "starts": float(len(plan.starts)),
    }


async def measure(pending: int, repeats: int, profile: bool) -> dict[str, float]:
    config = parse_config(
        {
            "nodes": [{"names": f"n[0001-{NODES}]"}],
            "partitions": [{"name": "gpu", "nodes": f"n[0001-{NODES}]", "default": True}],
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        c = make_cluster(
            config,
            f"sqlite:///{tmp}/ctld.db",
            clock=ManualClock(),
            dispatcher=RecordingDispatcher(),
        )
        await register_all(c, cpus=CPUS, memory_mb=512 * 1024, gpus=GPUS)
        await _fill(c, pending)
        if os.environ.get("BENCH_GC") == "freeze":
            gc.freeze()
        await _timed_pass(c, refresh=True)  # settle reasons and forecasts once
        steady = [await _timed_pass(c, refresh=False) for _ in range(repeats)]
        recalc = await _timed_pass(c, refresh=True)
        quick_on = c.scheduler.quick
        c.scheduler.quick = None  # the probes wait for a pass: that pass is timed
        probes = []
        plain = []
        for _ in range(repeats):
            t0 = time.thread_time()
            await c.submit(USER, _spec(0))
            plain.append(time.thread_time() - t0)
            probes.append(await _timed_pass(c, refresh=False))
        c.scheduler.quick = quick_on
        # a real pass (not the timed parts above) leaves the scheduler its queue, which a
        # start at submit weighs (a plan applied without its pass leaves it none)
        await c.schedule_pass()
        quick = []  # a probe decided at submit (scheduler.start_on_submit), after a pass
        for _ in range(repeats if quick_on is not None else 0):
            t0 = time.thread_time()
            job = await c.submit(USER, _spec(0))
            quick.append(time.thread_time() - t0)
            assert job.state == js.RUNNING, "not started at submit"
            await c.schedule_pass()  # a whole pass: the next probe weighs its queue
        if profile and quick_on is not None:
            prof = cProfile.Profile()
            prof.enable()
            await c.submit(USER, _spec(0))
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        if profile:
            await c.submit(USER, _spec(0))
            clock = c.state.clock
            assert isinstance(clock, ManualClock)
            clock.advance(30.0)  # with the priority recalculation
            prof = cProfile.Profile()
            prof.enable()
            await c.schedule_pass()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
            snap = c.snapshot()
            prof = cProfile.Profile()
            prof.enable()
            schedule(snap)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
        while c._tasks:
            await asyncio.gather(*list(c._tasks))
        c.store.close()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows) * 1000

    out = {f"steady_{k}": med(steady, k) for k in ("refresh", "snapshot", "plan", "apply")}
    out.update({f"probe_{k}": med(probes, k) for k in ("refresh", "snapshot", "plan", "apply")})
    out.update({f"recalc_{k}": recalc[k] * 1000 for k in ("refresh", "snapshot", "plan", "apply")})
    out["probe_starts"] = statistics.median(p["starts"] for p in probes)
    out["submit"] = statistics.median(plain) * 1000
    out["submit_quick"] = statistics.median(quick) * 1000 if quick else float("nan")
    return out


# ------------------------------------------------ --quick-path: cost against the node count


def _best(samples: list[float]) -> float:
    return min(samples) * 1000


async def _settle(c: Cluster) -> None:
    while c._tasks:
        await asyncio.gather(*list(c._tasks))


async def measure_nodes(nodes: int, pending: int, repeats: int, profile: bool) -> dict[str, float]:
    """At ``nodes`` x 8 GPUs, half running an 8-GPU job: a 1-GPU submit that starts at
    submit (the quick path), a pass with nothing pending, and (the other half filled
    too) a pass over ``pending`` waiting 8-GPU jobs. Thread CPU, best of ``repeats``."""
    names = f"n[00001-{nodes:05d}]"
    config = parse_config(
        {
            "nodes": [{"names": names}],
            "partitions": [{"name": "gpu", "nodes": names, "default": True}],
        }
    )
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        c = make_cluster(
            config,
            f"sqlite:///{tmp}/ctld.db",
            clock=ManualClock(),
            dispatcher=RecordingDispatcher(),
        )
        await register_all(c, cpus=CPUS, memory_mb=512 * 1024, gpus=GPUS)
        quick_on, c.scheduler.quick = c.scheduler.quick, None
        for _ in range(nodes // 2):
            await c.submit(USER, _spec(GPUS, limit=86400))
        c.scheduler.quick = quick_on
        await c.schedule_pass()  # half the nodes busy; the base a start at submit needs
        await _settle(c)
        rounds = []
        for _ in range(repeats):
            times = []
            for _ in range(10):
                t0 = time.thread_time()
                job = await c.submit(USER, _spec(1))
                times.append(time.thread_time() - t0)
                assert job.state == js.RUNNING, "not started at submit"
            rounds.append(statistics.median(times))
        out["quick"] = _best(rounds)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            await c.submit(USER, _spec(1))
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        await _settle(c)
        empty = []
        for _ in range(repeats):
            t0 = time.thread_time()
            await c.schedule_pass()
            empty.append(time.thread_time() - t0)
        out["empty"] = _best(empty)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            await c.schedule_pass()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        # the rest of the nodes filled, then a deep queue of 8-GPU jobs that wait
        c.scheduler.quick = None
        for _ in range(nodes - nodes // 2):
            await c.submit(USER, _spec(GPUS, limit=86400))
        await c.schedule_pass()
        await _settle(c)
        for _ in range(pending):
            await c.submit(USER, _spec(GPUS, hold=True))
        held = [j.job_id for j in c.jobs.values() if j.hold]
        for i in range(0, len(held), 5000):
            await c.update_hold(
                USER, pb.UpdateJobRequest(job_ids=held[i : i + 5000], action=pb.JOB_UPDATE_RELEASE)
            )
        await c.schedule_pass()  # settle reasons and forecasts once
        full = []
        for _ in range(repeats):
            t0 = time.thread_time()
            await c.schedule_pass()
            full.append(time.thread_time() - t0)
        out["full"] = _best(full)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            await c.schedule_pass()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        await _settle(c)
        c.store.close()
    return out


def quick_path_table(node_counts: list[int], pending: int, repeats: int, profile: bool) -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; thread CPU, best of {repeats}\n")
    print(
        "| nodes | quick submit (1 GPU, starts at submit) | empty pass "
        f"| full pass, {pending:,} pending (all nodes busy) |"
    )
    print("|---:|---:|---:|---:|")
    for nodes in node_counts:
        r = asyncio.run(measure_nodes(nodes, pending, repeats, profile))
        print(
            f"| {nodes:,} | {r['quick']:.1f} ms | {r['empty']:.1f} ms | {r['full']:.1f} ms |",
            flush=True,
        )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, nargs="*", default=[10_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--quick-path",
        type=int,
        nargs="*",
        metavar="NODES",
        help="the table against the node count (default 1000 12500): start at submit, "
        "empty pass, full pass over --pending[0] waiting jobs",
    )
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.quick_path is not None:
        counts = args.quick_path or [1000, 12_500]
        quick_path_table(counts, args.pending[0], min(args.repeats, 3), args.profile)
        return 0
    print(f"{NODES} nodes x {GPUS} GPUs, each running an 8-GPU job; 8-GPU jobs pending\n")
    print("| pending | pass | snapshot + plan | refresh | snapshot | plan | apply |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for n in args.pending:
        r = asyncio.run(measure(n, args.repeats, args.profile))
        rows.append((n, r))
        for kind, label in (
            ("steady", "periodic"),
            ("probe", "one 1-CPU job starts"),
            ("recalc", "with the 30-s priority recalculation"),
        ):
            parts = [r[f"{kind}_{k}"] for k in ("refresh", "snapshot", "plan", "apply")]
            print(
                f"| {n:,} | {label} | {parts[1] + parts[2]:.1f} ms | "
                + " | ".join(f"{p:.1f} ms" for p in parts)
                + " |",
                flush=True,
            )
    print("\n| pending | submit, waiting for a pass | submit, started at submit |")
    print("|---|---:|---:|")
    for n, r in rows:
        print(f"| {n:,} | {r['submit']:.1f} ms | {r['submit_quick']:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
