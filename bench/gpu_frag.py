"""GPU fragmentation the ATC'23 way, and the 8-GPU job wait on a lab-sized cluster.

``--mode fgd`` (Weng et al., "Beware of Fragmentation", ATC'23, their "inflation"
experiment): the Alibaba openb cluster (all 1,523 nodes, 6,212 GPUs) starts empty; tasks
drawn at random (with replacement, seeded) from the openb pod list arrive one by one and
never leave; each goes through one pass of corral's scheduling core, and is placed or
dropped. Each GPU offers ``--shards`` shards (gres/shard; default 100, so every
fraction in the trace, a multiple of 0.01 GPU, is exact); a task asking for a fraction
of one GPU asks that many shards, rounded up (``--shards 0``: no sharing, a whole GPU
each). CPUs are counted in thousandths, as the trace (and the paper) counts them: a
task asking 4.3 CPUs takes 4.3 of a node's, not 5. Reported: at the moment the GPU
work submitted (a fraction of a GPU counts as that fraction, as in the paper) reaches
100% and 130% of the cluster's GPUs, the share of GPU capacity allocated (whole GPUs,
plus shards as their fraction of a GPU: the paper's GPU allocation ratio) and the share
of GPU work placed (what the tasks asked).

``--mode own``: the same cluster and placement at the trace's own load: its 8,152 tasks
each once, in the order they were created (98% of the cluster's GPUs as GPU work), none
leaving; reported: the share of GPU capacity allocated once all have arrived.

``--mode lab``: 64 nodes x 8 GPUs (64 CPUs, 512 GiB), a synthetic mixed load of 1/2/4/8-GPU
jobs (by count 40/20/20/20%) arriving as a Poisson stream at ``--load`` of the GPUs,
run times log-normal (median 1 h), limits 1-4x the run time; ctld's default scheduling
(EASY with predictions) with each placement. Reported: the mean and p95 wait of the
8-GPU jobs and of all jobs.

    nice -n 19 .venv/bin/python bench/gpu_frag.py --mode fgd --seeds 3
    nice -n 19 .venv/bin/python bench/gpu_frag.py --mode own
    .venv/bin/python bench/gpu_frag.py --mode lab --jobs 6000 --load 0.95
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import heapq
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
from ctld.sched.model import Demand
from ctld.sched.predict import RunTimePredictor

TRACE = Path(__file__).resolve().parents[2] / "shared/traces/gpu/alibaba-gpu-v2023"
PLACEMENTS = ("firstfit", "pack", "frag", "fgd", "random")
BATCH = 1000
# CPUs counted in thousandths, as the trace gives them (1000: whole CPUs, a task's
# rounded up, which strands GPUs behind CPUs the tasks never asked for)
CPU_UNIT = 1


@dataclass
class Node:
    name: str
    cpus: int
    mem: int
    gpus: int
    free_cpus: int
    free_mem: int
    free_gpus: set[int]
    shards: int = 0  # per GPU
    shared: dict[int, int] = dataclasses.field(default_factory=dict)  # GPU -> shards used

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
            shards_per_gpu=self.shards,
            shards_used=tuple(sorted(self.shared.items())),
        )

    def take(self, p: Placement) -> None:
        self.free_cpus -= p.cpus
        self.free_mem -= p.mem_mb
        if p.shards:
            g = p.gpu_indices[0]
            self.free_gpus.discard(g)
            self.shared[g] = self.shared.get(g, 0) + p.shards
            assert self.shared[g] <= self.shards, "a GPU over its shards"
            self.free_gpus.difference_update(p.gpu_indices[1:])
        else:
            assert not set(p.gpu_indices) & set(self.shared), "a shared GPU given whole"
            self.free_gpus.difference_update(p.gpu_indices)

    def give(self, p: Placement) -> None:
        self.free_cpus += p.cpus
        self.free_mem += p.mem_mb
        self.free_gpus.update(p.gpu_indices)


@dataclass(frozen=True)
class Task:
    gpus: int
    cpus: int
    mem: int
    milli: int  # GPU work asked for, in thousandths of a GPU (a fraction of one, or N x 1000)


def load_nodes(path: Path) -> list[Node]:
    with path.open() as fh:
        return [
            Node(
                r["sn"],
                int(r["cpu_milli"]) // CPU_UNIT,
                int(r["memory_mib"]),
                int(r["gpu"]),
                int(r["cpu_milli"]) // CPU_UNIT,
                int(r["memory_mib"]),
                set(range(int(r["gpu"]))),
            )
            for r in csv.DictReader(fh)
        ]


def load_tasks(path: Path, in_order: bool = False) -> list[Task]:
    """The pod list's tasks (``in_order``: by creation time, as they arrived)."""
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    if in_order:
        rows.sort(key=lambda r: int(r["creation_time"]))
    return [
        Task(
            int(r["num_gpu"]),
            max(1, math.ceil(int(r["cpu_milli"]) / CPU_UNIT)),
            int(r["memory_mib"]),
            int(r["gpu_milli"]) if int(r["num_gpu"]) == 1 else 1000 * int(r["num_gpu"]),
        )
        for r in rows
    ]


def shards_of(task: Task, per_gpu: int) -> int:
    """The shards a task asks: its fraction of one GPU, rounded up; 0: whole GPUs."""
    if not per_gpu or task.gpus != 1 or task.milli >= 1000:
        return 0
    return max(1, math.ceil(task.milli * per_gpu / 1000))


def demands_of(tasks: list[Task], per_gpu: int) -> tuple[Demand, ...]:
    """The trace's task mix as the expected demand (FGD's target workload)."""
    shapes: dict[tuple[int, int, int, int], int] = {}
    for t in tasks:
        if t.gpus:
            k = shards_of(t, per_gpu)
            key = (0 if k else t.gpus, k, t.cpus, t.mem)
            shapes[key] = shapes.get(key, 0) + 1
    return tuple(Demand(g, c, m, float(n), k) for (g, k, c, m), n in shapes.items())


def fgd(
    nodes_t: list[Node],
    tasks: list[Task],
    placement: str,
    seed: int,
    per_gpu: int,
    own: bool = False,
) -> tuple[float, float, float, float]:
    """At 100% and at 130% of the cluster's GPUs submitted (as GPU work, the paper's
    measure): the share of GPU capacity allocated, and the share of GPU work placed.
    ``own``: the trace's own tasks instead, each once in the order they arrived (98%
    of the GPUs); the figures at its end, twice."""
    nodes = {
        n.name: dataclasses.replace(n, free_gpus=set(n.free_gpus), shards=per_gpu, shared={})
        for n in nodes_t
    }
    capacity = sum(n.gpus for n in nodes.values())
    part = (PartitionView("p", tuple(nodes)),)
    settings = Settings(reserve_depth=0, forecast_depth=0, placement=placement)
    demands = demands_of(tasks, per_gpu) if placement in ("frag", "fgd") else ()
    rng = random.Random(seed)
    submitted = allocated = placed = 0
    at: dict[float, tuple[float, float]] = {}
    job_id = 0
    # arrivals go through the core in batches: a pass places its queue one job after
    # the other in order, so this is the same as one pass per arrival, only cheaper
    while len(at) < 2:
        if own:
            if job_id >= len(tasks):
                at = {1.0: (allocated / (1000 * capacity), placed / (1000 * capacity))}
                at[1.3] = at[1.0]
                break
            batch = {job_id + k + 1: t for k, t in enumerate(tasks[job_id : job_id + BATCH])}
        else:
            batch = {job_id + k + 1: rng.choice(tasks) for k in range(BATCH)}
        job_id += BATCH
        reqs = tuple(
            JobRequest(
                jid,
                ("p",),
                gpus_per_node=0 if shards_of(task, per_gpu) else task.gpus,
                shards_per_node=shards_of(task, per_gpu),
                cpus_per_task=task.cpus,
                mem_per_node_mb=task.mem,
                time_limit_s=-1,
            )
            for jid, task in batch.items()
        )
        snap = Snapshot(
            job_id + 1000 * seed,
            0.0,
            tuple(n.view() for n in nodes.values()),
            part,
            reqs,
            settings=settings,
            demands=demands,
        )
        started = {st.job_id: st for st in schedule(snap).starts}
        for jid, task in batch.items():
            submitted += task.milli
            st = started.get(jid)
            if st is not None:
                for p in st.placements:
                    nodes[p.node].take(p)
                k = shards_of(task, per_gpu)
                allocated += 1000 * k // per_gpu if k else 1000 * task.gpus
                placed += task.milli
            for mark in (1.0, 1.3):
                if mark not in at and submitted >= mark * 1000 * capacity:
                    at[mark] = (allocated / (1000 * capacity), placed / (1000 * capacity))
    return (*at[1.0], *at[1.3])


@dataclass(frozen=True)
class LabJob:
    job_id: int
    arrival: float
    gpus: int
    run: float
    limit: int
    user: str


def lab_jobs(n: int, load: float, seed: int, gpus_total: int) -> list[LabJob]:
    rng = random.Random(seed)
    sizes, weights = (1, 2, 4, 8), (0.4, 0.2, 0.2, 0.2)
    mean_gpus = sum(s * w for s, w in zip(sizes, weights, strict=True))
    median_run = 3600.0
    sigma = 1.0
    mean_run = median_run * math.exp(sigma**2 / 2)
    rate = load * gpus_total / (mean_gpus * mean_run)  # arrivals per second
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        run = min(rng.lognormvariate(math.log(median_run), sigma), 3 * 86400.0)
        limit = int(run * rng.uniform(1.0, 4.0)) + 60
        gpus = rng.choices(sizes, weights)[0]
        jobs.append(LabJob(i + 1, t, gpus, run, limit, f"u{rng.randrange(20)}"))
    return jobs


def lab(jobs: list[LabJob], placement: str) -> dict[str, float]:
    nodes = {
        f"n{i:02d}": Node(f"n{i:02d}", 64, 512 * 1024, 8, 64, 512 * 1024, set(range(8)))
        for i in range(64)
    }
    sc = SchedulerConfig()
    settings = Settings(
        reserve_depth=sc.reserve_depth,
        forecast_depth=0,
        placement=placement,
        predict=sc.predict,
        backfill_order=sc.backfill_order,
    )
    part = (PartitionView("p", tuple(nodes)),)
    by_id = {j.job_id: j for j in jobs}
    predictor = RunTimePredictor()
    predicted: dict[int, int] = {}
    pending: dict[int, LabJob] = {}
    running: dict[int, tuple[float, tuple[Placement, ...]]] = {}
    ends: list[tuple[float, int]] = []
    waits: dict[int, list[float]] = {1: [], 2: [], 4: [], 8: []}
    i = 0
    while i < len(jobs) or ends:
        now = min(jobs[i].arrival if i < len(jobs) else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= now:
            _, jid = heapq.heappop(ends)
            start, placed = running.pop(jid)
            for p in placed:
                nodes[p.node].give(p)
            predictor.observe(by_id[jid].user, now - start, by_id[jid].limit)
        while i < len(jobs) and jobs[i].arrival <= now:
            j = jobs[i]
            pending[j.job_id] = j
            predicted[j.job_id] = predictor.predict(j.user, j.limit)
            i += 1
        if not pending:
            continue
        reqs = tuple(
            JobRequest(
                j.job_id,
                ("p",),
                gpus_per_node=j.gpus,
                cpus_per_task=8 * j.gpus,
                mem_per_node_mb=64 * 1024 * j.gpus,
                time_limit_s=j.limit,
                user=j.user,
                submit_time=j.arrival,
                predicted_s=predicted[j.job_id],
            )
            for j in pending.values()
        )
        runs = tuple(
            RunningView(
                jid,
                start + by_id[jid].limit,
                placed,
                start_time=start,
                predicted_s=predicted[jid],
            )
            for jid, (start, placed) in running.items()
        )
        snap = Snapshot(
            1, now, tuple(n.view() for n in nodes.values()), part, reqs, runs, (), settings
        )
        for st in schedule(snap).starts:
            j = pending.pop(st.job_id)
            for p in st.placements:
                nodes[p.node].take(p)
            running[j.job_id] = (now, st.placements)
            heapq.heappush(ends, (now + min(j.run, j.limit), j.job_id))
            waits[j.gpus].append(now - j.arrival)
    everyone = sorted(w for ws in waits.values() for w in ws)
    eight = sorted(waits[8])
    return {
        "wait8_mean": statistics.fmean(eight),
        "wait8_p95": eight[int(0.95 * len(eight))],
        "wait_mean": statistics.fmean(everyone),
        "wait_p95": everyone[int(0.95 * len(everyone))],
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("fgd", "own", "lab"), default="fgd")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--seeds", type=int, default=3, help="fgd: repetitions (random task orders)")
    ap.add_argument("--first-seed", type=int, default=0, help="fgd: seeds from this one on")
    ap.add_argument("--jobs", type=int, default=20000, help="lab: jobs in the synthetic load")
    ap.add_argument("--load", type=float, default=0.9, help="lab: offered GPU load")
    ap.add_argument("--placement", action="append", choices=PLACEMENTS)
    ap.add_argument("--shards", type=int, default=100, help="fgd: shards per GPU (0: none)")
    ap.add_argument("--nodes", type=int, default=0, help="fgd: N nodes of the mix (0: all)")
    args = ap.parse_args(argv)
    placements = args.placement or list(PLACEMENTS)
    if args.mode == "own":  # the trace's own tasks, each once, as they arrived
        nodes = load_nodes(args.trace / "openb_node_list_all_node.csv")
        tasks = load_tasks(args.trace / "openb_pod_list_default.csv", in_order=True)
        print(
            f"{len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs; the trace's "
            f"{len(tasks)} tasks in creation order; {args.shards} shards per GPU\n"
        )
        print("| placement | GPU capacity allocated | GPU work placed | tasks of the trace |")
        print("|---|---:|---:|---:|")
        for placement in placements:
            r = fgd(nodes, tasks, placement, 0, args.shards, own=True)
            print(
                f"| {placement} | {100 * r[0]:.2f}% | {100 * r[1]:.2f}% | {len(tasks)} |",
                flush=True,
            )
    elif args.mode == "fgd":
        nodes = load_nodes(args.trace / "openb_node_list_all_node.csv")
        if args.nodes:  # a smaller cluster of the same mix: every k-th node
            nodes = nodes[:: max(1, len(nodes) // args.nodes)][: args.nodes]
        tasks = load_tasks(args.trace / "openb_pod_list_default.csv")
        print(
            f"{len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs; {len(tasks)} task kinds "
            f"drawn at random; {args.shards} shards per GPU; "
            f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}\n"
        )
        print(
            "| placement | 100% submitted: GPU capacity allocated | GPU work placed "
            "| 130% submitted: GPU capacity allocated | GPU work placed | s per run |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for placement in placements:
            t0 = time.process_time()
            seeds = range(args.first_seed, args.first_seed + args.seeds)
            runs = [fgd(nodes, tasks, placement, seed, args.shards) for seed in seeds]
            cols = " | ".join(
                f"{100 * statistics.fmean(r[k] for r in runs):.1f}%" for k in range(4)
            )
            spent = (time.process_time() - t0) / args.seeds
            print(f"| {placement} | {cols} | {spent:.0f} |", flush=True)
    else:
        jobs = lab_jobs(args.jobs, args.load, 1, 512)
        print(f"64 nodes x 8 GPUs, {len(jobs)} jobs (1/2/4/8 GPUs), offered load {args.load}\n")
        print(
            "| placement | 8-GPU jobs: mean wait min | p95 wait min "
            "| all jobs: mean wait min | p95 wait min |"
        )
        print("|---|---:|---:|---:|---:|")
        for placement in placements:
            r = lab(jobs, placement)
            print(
                f"| {placement} | {r['wait8_mean'] / 60:.1f} | {r['wait8_p95'] / 60:.1f} | "
                f"{r['wait_mean'] / 60:.1f} | {r['wait_p95'] / 60:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
