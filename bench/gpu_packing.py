"""GPU fragmentation: replay the Alibaba GPU trace with first-fit and with corral's packing.

Nodes are the trace's GPU nodes (CPUs, memory, 1-8 GPUs each); pods arrive at their
creation time, ask for ``num_gpu`` whole GPUs (a shared fraction counts as one), their
CPUs and memory, and hold them for ``deletion - scheduled`` seconds. The same pure
scheduling core places them (no time limits: pods have none), once with
``placement="firstfit"`` and once with ``"pack"``. Sampled every ``--sample`` seconds
of trace time: how many nodes are fragmented (some but not all GPUs in use, so a
whole-node job cannot start there) and how many 8-GPU nodes are wholly free.

    .venv/bin/python bench/gpu_packing.py [--pods N] [--sample 3600]
"""

from __future__ import annotations

import argparse
import csv
import heapq
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ctld.sched import JobRequest, NodeView, PartitionView, Settings, Snapshot, schedule

TRACE = Path(__file__).resolve().parents[2] / "shared/traces/gpu/alibaba-gpu-v2023"


@dataclass
class Node:
    name: str
    cpus: int
    mem: int
    gpus: int
    free_cpus: int = 0
    free_mem: int = 0
    free_gpus: set[int] = field(default_factory=set)

    def view(self) -> NodeView:
        return NodeView(
            self.name,
            self.cpus,
            self.mem,
            self.gpus,
            self.free_cpus,
            self.free_mem,
            tuple(sorted(self.free_gpus)),
            idle=self.free_cpus == self.cpus and len(self.free_gpus) == self.gpus,
        )


@dataclass(frozen=True)
class Pod:
    pod_id: int
    arrival: float
    duration: float
    gpus: int
    cpus: int
    mem: int


def load_nodes(path: Path) -> list[Node]:
    nodes = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            cpus = int(row["cpu_milli"]) // 1000
            mem = int(row["memory_mib"])
            gpus = int(row["gpu"])
            node = Node(row["sn"], cpus, mem, gpus, cpus, mem, set(range(gpus)))
            nodes.append(node)
    return nodes


def load_pods(path: Path, limit: int, speedup: float = 1.0) -> list[Pod]:
    pods = []
    with path.open() as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            start = float(row["scheduled_time"] or row["creation_time"])
            end = float(row["deletion_time"])
            if end <= start:
                continue
            gpus = int(row["num_gpu"])
            pods.append(
                Pod(
                    i,
                    float(row["creation_time"]) / speedup,
                    end - start,
                    gpus,
                    max(1, math.ceil(int(row["cpu_milli"]) / 1000)),
                    int(row["memory_mib"]),
                )
            )
    pods.sort(key=lambda p: (p.arrival, p.pod_id))
    return pods[:limit] if limit else pods


def replay(
    nodes_template: list[Node], pods: list[Pod], placement: str, sample_s: float
) -> dict[str, float]:
    nodes = {
        n.name: Node(n.name, n.cpus, n.mem, n.gpus, n.cpus, n.mem, set(range(n.gpus)))
        for n in nodes_template
    }
    names = tuple(nodes)
    part = (PartitionView("p", names),)
    settings = Settings(backfill=True, reserve_depth=0, forecast_depth=0, placement=placement)
    by_id = {p.pod_id: p for p in pods}
    pending: list[int] = []
    ends: list[tuple[float, int, list[tuple[str, int, int, tuple[int, ...]]]]] = []
    arrivals = list(pods)
    ai = 0
    now = 0.0
    next_sample = arrivals[0].arrival if arrivals else 0.0
    fragmented: list[int] = []
    whole_free: list[int] = []
    frag8: list[int] = []
    waits: list[float] = []
    passes = 0
    pass_s = 0.0
    while ai < len(arrivals) or ends or pending:
        t_arrival = arrivals[ai].arrival if ai < len(arrivals) else math.inf
        t_end = ends[0][0] if ends else math.inf
        now = min(t_arrival, t_end)
        if now == math.inf:
            break  # pods that can never fit
        while next_sample <= now:
            fragmented.append(sum(1 for n in nodes.values() if 0 < len(n.free_gpus) < n.gpus))
            frag8.append(sum(1 for n in nodes.values() if n.gpus == 8 and 0 < len(n.free_gpus) < 8))
            whole_free.append(
                sum(1 for n in nodes.values() if n.gpus == 8 and len(n.free_gpus) == 8)
            )
            next_sample += sample_s
        while ends and ends[0][0] <= now:
            _, _, placed = heapq.heappop(ends)
            for name, cpus, mem, gpus in placed:
                node = nodes[name]
                node.free_cpus += cpus
                node.free_mem += mem
                node.free_gpus.update(gpus)
        while ai < len(arrivals) and arrivals[ai].arrival <= now:
            pending.append(arrivals[ai].pod_id)
            ai += 1
        if not pending:
            continue
        reqs = tuple(
            JobRequest(
                pid,
                ("p",),
                gpus_per_node=by_id[pid].gpus,
                cpus_per_task=by_id[pid].cpus,
                mem_per_node_mb=by_id[pid].mem,
                time_limit_s=-1,
            )
            for pid in pending
        )
        snap = Snapshot(
            1, now, tuple(n.view() for n in nodes.values()), part, reqs, (), (), settings
        )
        began = time.perf_counter()
        plan = schedule(snap)
        pass_s += time.perf_counter() - began
        passes += 1
        started = set()
        for start in plan.starts:
            pod = by_id[start.job_id]
            placed = []
            for p in start.placements:
                node = nodes[p.node]
                node.free_cpus -= p.cpus
                node.free_mem -= p.mem_mb
                node.free_gpus.difference_update(p.gpu_indices)
                placed.append((p.node, p.cpus, p.mem_mb, p.gpu_indices))
            heapq.heappush(ends, (now + pod.duration, pod.pod_id, placed))
            waits.append(now - pod.arrival)
            started.add(pod.pod_id)
        pending = [pid for pid in pending if pid not in started]
        if not ends and ai >= len(arrivals):
            break
    return {
        "fragmented_mean": statistics.fmean(fragmented) if fragmented else 0.0,
        "fragmented_p95": _pct(fragmented, 95),
        "whole_free_mean": statistics.fmean(whole_free) if whole_free else 0.0,
        "frag8_mean": statistics.fmean(frag8) if frag8 else 0.0,
        "wait_mean": statistics.fmean(waits) if waits else 0.0,
        "never_started": len(pending),
        "passes": passes,
        "pass_ms": 1000 * pass_s / max(passes, 1),
    }


def _pct(values: list[int], p: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--pods", type=int, default=0, help="first N pods by arrival (0: all)")
    ap.add_argument("--sample", type=float, default=3600.0, help="seconds between samples")
    ap.add_argument(
        "--lab-nodes",
        type=int,
        default=0,
        help="only the first N 8-GPU nodes (a lab-sized cluster the trace loads; 0: all nodes)",
    )
    ap.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="divide arrival times by this (the trace is light: most pods run minutes)",
    )
    args = ap.parse_args(argv)
    nodes = load_nodes(args.trace / "openb_node_list_gpu_node.csv")
    if args.lab_nodes:
        nodes = [n for n in nodes if n.gpus == 8][: args.lab_nodes]
    pods = load_pods(args.trace / "openb_pod_list_default.csv", args.pods, args.speedup)
    eight = sum(1 for n in nodes if n.gpus == 8)
    print(
        f"{len(nodes)} GPU nodes ({eight} with 8 GPUs), {len(pods)} pods, "
        f"arrivals sped up {args.speedup:g}x, sampled every {args.sample:g} s\n"
    )
    print(
        "| placement | fragmented nodes (mean) | (p95) | fragmented 8-GPU nodes (mean) "
        "| free 8-GPU nodes (mean) | mean wait s | never started | pass ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for placement in ("firstfit", "pack"):
        r = replay(nodes, pods, placement, args.sample)
        print(
            f"| {placement} | {r['fragmented_mean']:.1f} | {r['fragmented_p95']:.0f} | "
            f"{r['frag8_mean']:.1f} | {r['whole_free_mean']:.1f} | {r['wait_mean']:.1f} | "
            f"{r['never_started']} | "
            f"{r['pass_ms']:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
