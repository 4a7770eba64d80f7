"""ctld at scale: simulated nodes (corral.localcluster.simnodes), deep queues.

    .venv/bin/python -m bench.scale                          # 100 and 1,000 nodes
    .venv/bin/python -m bench.scale --nodes 1000 --pending 1000,10000,50000,100000
    .venv/bin/python -m bench.scale --quick                  # 100 nodes, 1k/5k pending
    .venv/bin/python -m bench.scale --nodes 1000,5000,12500 --idle-only  # nodes alone

For each node count: a real ctld (bench/ctld_probe.py) and one simulator process
playing every node (8 fake GPUs, 64 CPUs each; heartbeats every 10 s, the config
default). Every node is first filled with one long 8-GPU job, so the pending jobs (each
wanting 8 GPUs) cannot start and every pass weighs all of them. Then, at each queue
depth (pending jobs submitted held over gRPC, then released in one UpdateJob):

- ctld CPU per second over a quiet window (heartbeats and the periodic pass);
- one scheduling pass (snapshot + plan, ctld's own timers), alone and with a busy
  process spinning beside it;
- submit to start of a job that fits (1 CPU, no GPU, backfilled beside the 8-GPU
  jobs), p50 / p99 over sequential probes: from before SubmitJob is sent to ctld's
  recorded start_time;
- ctld RSS, and RSS per pending job over the 0-pending baseline;
- ``squeue`` / ``squeue -h -o "%i %T"`` / ``sacct -X`` / ``sinfo`` wall time (fresh
  processes), and a scrape of ``/metrics``;
- a ctld restart: time until every node has registered again (the storm).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PYTHON,
    VENV_BIN,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    grpc_metadata,
    log,
    ms,
    percentile,
    run_cmd,
    save_result,
)
from corral.testing import wait_for

CPUS = 64
GPUS = 8
HEARTBEAT_S = 10.0
QUIET_S = 10.0
SLURM_RSS = "36 MiB at 5,000 pending (~5 KiB/job)"
SLURM_SQUEUE = {1000: "26 ms", 5000: "101 ms"}


def _spec(cluster: BenchCluster, *, runtime: float, gpus: int, limit: int, hold: bool) -> Any:
    from corral.wire import corral_pb2 as pb

    return pb.JobSpec(
        name="scale",
        script=f"#!/bin/sh\n#SIM runtime={runtime}\ntrue\n",
        work_dir=str(cluster.work_dir),
        stdout_pattern="/dev/null",
        environment={"PATH": "/usr/bin:/bin"},
        export="ALL",
        gpus_per_node=gpus,
        time_limit_s=limit,
        hold=hold,
        submit_line="bench.scale",
    )


async def _submit(cluster: BenchCluster, spec: Any, n: int, inflight: int = 64) -> list[int]:
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    md = grpc_metadata(cluster)
    ids: list[int] = []
    left = [n]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                reply = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=md)
                ids.append(int(reply.job_id))

        await asyncio.gather(*(worker() for _ in range(inflight)))
    return ids


async def _release(cluster: BenchCluster, ids: list[int]) -> None:
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        for i in range(0, len(ids), 5000):
            await stub.UpdateJob(
                pb.UpdateJobRequest(job_ids=ids[i : i + 5000], action=pb.JOB_UPDATE_RELEASE),
                metadata=grpc_metadata(cluster),
                timeout=300,
            )


AT_SUBMIT: list[bool] = []  # per probe: started at submit (start_on_submit), not by a pass


async def _submit_to_start(cluster: BenchCluster, n: int) -> list[float]:
    """Sequential probes: a 1-CPU job that fits now; submit sent -> ctld's start_time."""
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    md = grpc_metadata(cluster)
    spec = _spec(cluster, runtime=0.01, gpus=0, limit=60, hold=False)
    out: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        for _ in range(n):
            t0 = time.time()
            reply = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=md)
            get = pb.GetJobsRequest(filter=pb.JobFilter(job_ids=[reply.job_id]))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                jobs = (await stub.GetJobs(get, metadata=md)).jobs
                if jobs and jobs[0].start_time > 0:
                    out.append(jobs[0].start_time - t0)
                    told = pb.GetJobsRequest(filter=get.filter, with_events=True)
                    (job,) = (await stub.GetJobs(told, metadata=md)).jobs
                    AT_SUBMIT.append(any(e.cause == "sched:submit" for e in job.events))
                    break
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
    return out


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _quiet_cpu(cluster: BenchCluster, seconds: float) -> float:
    before, t0 = _cpu_s(cluster.ctld_pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu_s(cluster.ctld_pid) - before) / (time.monotonic() - t0)


def _pass_ms(cluster: BenchCluster, seconds: float, *, busy: bool) -> tuple[float, float, int]:
    """Mean snapshot + plan time of the passes ctld ran in a window (periodic ones):
    wall, and the CPU time of ctld's loop thread (what other processes took excluded)."""
    burner = None
    if busy:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        a = cluster.store_stats()
        time.sleep(seconds)
        b = cluster.store_stats()
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    passes = int(b["passes"]) - int(a["passes"])

    def spent(keys: tuple[str, str]) -> float:
        total = sum(float(b.get(k, 0.0)) - float(a.get(k, 0.0)) for k in keys)
        return total / passes * 1000 if passes else float("nan")

    wall = spent(("snapshot_s", "plan_s"))
    return wall, spent(("snapshot_cpu_s", "plan_cpu_s")), passes


def _command_ms(cluster: BenchCluster, argv: list[str], runs: int = 3) -> str:
    samples = []
    for _ in range(runs):
        dt, proc = run_cmd([str(VENV_BIN / argv[0]), *argv[1:]], cluster.env(), cluster.work_dir)
        if proc.returncode != 0:
            return f"error: {proc.stderr.strip()[-80:]}"
        samples.append(dt)
    return f"{sorted(samples)[len(samples) // 2] * 1000:.0f} ms"


def _metrics_ms(cluster: BenchCluster, runs: int = 3) -> str:
    """A Prometheus scrape of ctld's /metrics (the median of ``runs``) and its size."""
    samples, size = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        size = len(cluster.scrape(timeout=60).encode())
        samples.append(time.perf_counter() - t0)
    return f"{sorted(samples)[len(samples) // 2] * 1000:.0f} ms ({size / 1024:.0f} KiB)"


def _nodes_up(cluster: BenchCluster) -> int:
    # the state alone (the field mask): polled through a storm
    nodes = cluster.client().call("GetNodes", {"fields": ["state"]}).get("nodes", [])
    up = ("NODE_STATE_IDLE", "NODE_STATE_MIXED", "NODE_STATE_ALLOCATED")
    return sum(1 for n in nodes if n.get("state") in up)


def _storm(cluster: BenchCluster, nodes: int) -> tuple[float, float, float]:
    """Restart ctld: (load-to-ready s, ready-to-all-registered s, ctld CPU s in between)."""
    cluster.stop_process("ctld")
    t0 = time.monotonic()
    cluster.start_ctld(timeout=600)
    ready = time.monotonic()
    pid = cluster.ctld_pid
    cpu0 = _cpu_s(pid)
    deadline = ready + 600
    while _nodes_up(cluster) < nodes and time.monotonic() < deadline:
        # every node's record is built for each answer, mask or not (~23 us a node):
        # polled faster, at 5,000 nodes the poll was 46% of ctld's CPU in the storm
        time.sleep(0.1 if nodes <= 1000 else 1.0)
    done = time.monotonic()
    return ready - t0, done - ready, _cpu_s(pid) - cpu0


IDLE = Table(
    "Nodes alone (no jobs): heartbeat CPU and the registration storm",
    [
        "simulated nodes",
        "heartbeats/s",
        "ctld CPU (quiet)",
        "CPU per node per s",
        "ctld RSS",
        "restart: ready",
        "restart: all registered",
        "ctld CPU in the storm",
    ],
)


def idle_nodes(cluster: BenchCluster, nodes: int, result: PhaseResult) -> None:
    """``--idle-only``: ctld's heartbeat CPU and a restart's registration storm, no jobs
    (what each node costs on its own, cheap enough to run at every size)."""
    wait_for(lambda: _nodes_up(cluster) >= nodes, 600, "every node registered", interval=0.5)
    cpu = _quiet_cpu(cluster, QUIET_S)
    rss = cluster.rss_mib()
    load_s, storm_s, storm_cpu = _storm(cluster, nodes)
    IDLE.add(
        f"{nodes:,}",
        f"{nodes / HEARTBEAT_S:.0f}",
        f"{cpu * 100:.1f}%",
        f"{cpu / nodes * 1e6:.1f} us",
        f"{rss:.0f} MiB",
        f"{load_s:.1f} s",
        f"{storm_s:.1f} s",
        f"{storm_cpu:.1f} s",
    )
    result.data[f"idle_{nodes}"] = {
        "cpu": cpu,
        "rss_mib": rss,
        "load_s": load_s,
        "register_s": storm_s,
        "storm_cpu_s": storm_cpu,
    }
    log(f"scale{nodes}: {IDLE.rows[-1]}")
    if IDLE not in result.tables:
        result.tables.append(IDLE)


def run_nodes(
    nodes: int,
    levels: list[int],
    probes: int,
    result: PhaseResult,
    commands: bool = True,
    idle_only: bool = False,
) -> None:
    with bench_cluster(
        f"scale{nodes}",
        nodes=nodes,
        cpus_per_node=CPUS,
        gpus_per_node=GPUS,
        memory_mb_per_node=512 * 1024,
        simulated=True,
        heartbeat_interval_s=HEARTBEAT_S,
        heartbeat_timeout_s=120.0,
    ) as cluster:
        if idle_only:
            idle_nodes(cluster, nodes, result)
            return
        rows: dict[str, Any] = {}
        idle_cpu = _quiet_cpu(cluster, QUIET_S)
        rss0 = cluster.rss_mib()
        log(f"scale{nodes}: idle ctld {idle_cpu * 100:.1f}% CPU, {rss0:.0f} MiB; filling nodes")
        busy = asyncio.run(
            _submit(
                cluster, _spec(cluster, runtime=36000, gpus=GPUS, limit=86400, hold=False), nodes
            )
        )
        wait_for(
            lambda: (
                len(
                    cluster.client()
                    .call("GetJobs", {"filter": {"states": ["JOB_STATE_RUNNING"]}})
                    .get("jobs", [])
                )
                >= len(busy)
            ),
            300,
            "every node busy",
            interval=0.5,
        )
        table = Table(
            f"{nodes} simulated nodes x {GPUS} GPUs, every node busy, 8-GPU jobs pending",
            [
                "pending",
                "ctld CPU (quiet)",
                "pass",
                "pass, 2nd core busy",
                "submit->start p50 / p99",
                "ctld RSS",
                "`squeue`",
                '`squeue -h -o "%i %T"`',
                "`sacct -X`",
                "`sinfo`",
                "GET /metrics",
            ],
        )
        rows["0"] = {"idle_cpu": idle_cpu, "rss_mib": rss0}
        have = 0
        pending_spec = _spec(cluster, runtime=60, gpus=GPUS, limit=3600, hold=True)
        for level in levels:
            if level > have:
                log(f"scale{nodes}: submitting {level - have} held jobs")
                t0 = time.monotonic()
                ids = asyncio.run(_submit(cluster, pending_spec, level - have))
                log(f"scale{nodes}: {len(ids) / (time.monotonic() - t0):.0f} submits/s; releasing")
                asyncio.run(_release(cluster, ids))
                have += len(ids)
                time.sleep(3)  # the pass the release woke
            cpu = _quiet_cpu(cluster, QUIET_S)
            pass_alone, cpu_alone, n_alone = _pass_ms(cluster, 6, busy=False)
            pass_busy, cpu_busy, n_busy = _pass_ms(cluster, 6, busy=True)
            del AT_SUBMIT[:]
            lat = asyncio.run(_submit_to_start(cluster, probes))
            log(f"scale{nodes}: {sum(AT_SUBMIT)} of {len(lat)} probes started at submit")
            rss = cluster.rss_mib()
            per_job = (rss - rss0) * 1024 / level if level else 0.0
            squeue = squeue_short = sacct = sinfo = metrics = "not run"
            if commands:
                squeue = _command_ms(cluster, ["squeue"])
                squeue_short = _command_ms(cluster, ["squeue", "-h", "-o", "%i %T"])
                sacct = _command_ms(cluster, ["sacct", "-X"])
                sinfo = _command_ms(cluster, ["sinfo"])
                metrics = _metrics_ms(cluster)
            p50, p99 = percentile(lat, 50), percentile(lat, 99)
            table.add(
                level,
                f"{cpu * 100:.1f}%",
                f"{pass_alone:.0f} ms, CPU {cpu_alone:.0f} ms ({n_alone})",
                f"{pass_busy:.0f} ms, CPU {cpu_busy:.0f} ms ({n_busy})",
                f"{ms(p50)} / {ms(p99)}",
                f"{rss:.0f} MiB ({per_job:.1f} KiB/job)",
                squeue,
                squeue_short,
                sacct,
                sinfo,
                metrics,
            )
            rows[str(level)] = {
                "quiet_cpu": cpu,
                "pass_ms": pass_alone,
                "pass_cpu_ms": cpu_alone,
                "pass_busy_ms": pass_busy,
                "pass_busy_cpu_ms": cpu_busy,
                "submit_to_start_s": lat,
                "rss_mib": rss,
                "squeue": squeue,
                "squeue_short": squeue_short,
                "sacct": sacct,
                "sinfo": sinfo,
                "metrics": metrics,
            }
            log(f"scale{nodes}: {table.rows[-1]}")
        log(f"scale{nodes}: restarting ctld with {have} pending, {len(busy)} running")
        load_s, storm_s, storm_cpu = _storm(cluster, nodes)
        rows["storm"] = {"load_s": load_s, "register_s": storm_s, "cpu_s": storm_cpu}
        log(f"scale{nodes}: storm: ready {load_s:.1f} s, registered {storm_s:.1f} s later")
        table.notes.append(
            f"ctld idle (no jobs): {idle_cpu * 100:.1f}% of a core at {nodes / HEARTBEAT_S:.0f} "
            f"heartbeats/s, {rss0:.0f} MiB RSS"
        )
        table.notes.append(
            f"restart with {have} pending + {len(busy)} running: ctld loads and is ready in "
            f"{load_s:.1f} s; all {nodes} nodes registered again {storm_s:.1f} s later "
            f"(ctld CPU {storm_cpu:.1f} s)"
        )
        result.tables.append(table)
        result.data[str(nodes)] = rows


def main() -> None:
    # a TERM (timeout, Ctrl-C in a wrapper) still stops the cluster it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="100,1000")
    p.add_argument("--pending", default="1000,10000,50000,100000")
    p.add_argument("--probes", type=int, default=50)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-commands", action="store_true", help="skip squeue/sacct timings")
    p.add_argument(
        "--idle-only", action="store_true", help="no jobs: heartbeat CPU and the storm only"
    )
    args = p.parse_args()
    node_counts = [100] if args.quick else [int(x) for x in args.nodes.split(",")]
    levels = [1000, 5000] if args.quick else [int(x) for x in args.pending.split(",")]
    result = PhaseResult(
        "scale",
        {
            "nodes": node_counts,
            "pending": levels,
            "probes": args.probes,
            "node": f"{CPUS} CPUs, {GPUS} GPUs (simulated)",
            "python": PYTHON,
        },
    )
    t0 = time.monotonic()
    for n in node_counts:
        run_nodes(
            n,
            levels,
            20 if args.quick else args.probes,
            result,
            not args.no_commands,
            args.idle_only,
        )
        result.elapsed_s = time.monotonic() - t0
        save_result(result)  # what is done so far survives a later node count's failure
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)}")


if __name__ == "__main__":
    main()
