"""The cost of ``GET /metrics`` at scale (issue 26): 1,000 simulated nodes x 8 GPUs
(corral.localcluster.simnodes, whose heartbeats carry every GPU's status as noded's do),
every node busy with one 8-GPU job, jobs pending behind them.

    .venv/bin/python -m bench.metrics_cost                 # 1,000 nodes, 2,000 pending
    .venv/bin/python -m bench.metrics_cost --nodes 100 --pending 200

Prints: series exported, body size, scrape wall time p50/p95 (sequential scrapes,
what Prometheus waits for) and ctld CPU per scrape (what the event loop spends on it,
so what other requests wait behind).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BenchCluster, bench_cluster, log, ms, percentile
from bench.scale import _release, _spec, _submit
from corral.testing.harness import wait_for


def scrape(c: BenchCluster) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    body = c.scrape(timeout=60).encode()
    return time.perf_counter() - t0, body


def run(nodes: int, pending: int, scrapes: int) -> None:
    with bench_cluster(
        "metrics",
        nodes=nodes,
        cpus_per_node=64,
        gpus_per_node=8,
        simulated=True,
        heartbeat_interval_s=10.0,
        heartbeat_timeout_s=60.0,
    ) as c:
        busy = _spec(c, runtime=3600, gpus=8, limit=7200, hold=False)
        log(f"metrics: filling {nodes} nodes")
        asyncio.run(_submit(c, busy, nodes))
        wait_for(
            lambda: f'corral_jobs{{state="RUNNING"}} {nodes}.0' in scrape(c)[1].decode(),
            300,
            "every node busy",
        )
        ids = asyncio.run(_submit(c, _spec(c, runtime=60, gpus=8, limit=600, hold=True), pending))
        asyncio.run(_release(c, ids))
        # every node's GPUs in the heartbeats' figures (one heartbeat interval at most)
        wait_for(
            lambda: scrape(c)[1].count(b"corral_gpu_utilization_ratio{") == nodes * 8,
            60,
            "every GPU's figures",
        )
        proc = psutil.Process(c.ctld_pid)
        walls, cpu = [], 0.0
        body = b""
        for _ in range(scrapes):
            before = sum(proc.cpu_times()[:2])
            wall, body = scrape(c)
            cpu += sum(proc.cpu_times()[:2]) - before
            walls.append(wall)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        print(f"nodes {nodes} x 8 GPUs, {nodes} running, {pending} pending jobs")
        print(f"series {series}, body {len(body) / 1024:.0f} KiB")
        print(f"scrape wall p50 {ms(percentile(walls, 50))}, p95 {ms(percentile(walls, 95))}")
        print(f"ctld CPU per scrape {ms(cpu / scrapes)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pending", type=int, default=2000)
    p.add_argument("--scrapes", type=int, default=20)
    a = p.parse_args()
    run(a.nodes, a.pending, a.scrapes)


if __name__ == "__main__":
    main()
