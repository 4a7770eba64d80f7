"""What each pending job, finished job and node costs in ctld's memory.

    .venv/bin/python -m bench.ctld_memory                   # 1,000 nodes, 2,000 jobs
    .venv/bin/python -m bench.ctld_memory --nodes 200 --jobs 500
    .venv/bin/python -m bench.ctld_memory --rss --jobs 5000  # a real ctld's RSS

ctld runs in this process (corral.testing's InProcessCluster: the real Cluster, a
SQLite store, a recording dispatcher in place of the nodes). Three measures of each
step: tracemalloc (Python's own allocations: dicts, strings, records), malloc's bytes
in use (glibc's mallinfo2: protobuf's C arenas too, which tracemalloc does not see) and
RSS (what the process holds, freed memory not given back included), each divided by
the count:

- a node: a cluster of ``--nodes`` nodes registered and heard once, less one of one;
- a pending job: ``--jobs`` held jobs submitted as sbatch submits them (a script of
  ~300 bytes, the submitter's environment: ``--export=ALL``);
- a finished job, kept for ``min_job_age``: the same jobs released, started, ended
  (COMPLETED), and forgotten by nothing yet, over the cluster before they came.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil

from bench.common import PhaseResult, Table, log, save_result
from corral.testing.inprocess import InProcessCluster

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --gpus=1\n" + (
    "module load cuda\nsrun python train.py --epochs 10 --lr 0.001 --data /scratch/data\n" * 3
)


def _env() -> dict[str, str]:
    """An environment the size of a login shell's (sbatch --export=ALL sends it all)."""
    env = {k: v for k, v in os.environ.items() if len(v) < 400}
    for i in range(max(0, 40 - len(env))):
        env[f"VAR_{i}"] = f"/opt/software/package-{i}/bin"
    return env


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def _in_use() -> int:
    """malloc's bytes in use (glibc): protobuf's arenas included, freed memory not."""
    info = _LIBC.mallinfo2()
    return int(info.uordblks + info.hblkhd)


Reading = tuple[int, int, int]


def _reading() -> Reading:
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    return traced, _in_use(), psutil.Process().memory_info().rss


def _delta(after: Reading, before: Reading, n: int) -> tuple[float, float, float]:
    return tuple((a - b) / n for a, b in zip(after, before, strict=True))  # type: ignore[return-value]


def _cluster(base: Path, tag: str, nodes: int) -> InProcessCluster:
    return InProcessCluster(
        base / tag, nodes=nodes, cpus_per_node=64, gpus_per_node=8, memory_mb_per_node=512_000
    )


def run(nodes: int, jobs: int) -> PhaseResult:
    result = PhaseResult("ctld_memory", {"nodes": nodes, "jobs": jobs})
    base = Path(tempfile.mkdtemp(prefix="corral-bench-memory-"))
    _cluster(base, "warm", 2).register_nodes()  # imports and caches made once, not counted
    tracemalloc.start()
    start = _reading()
    one = _cluster(base, "one", 1)
    one.register_nodes()
    one_cost = _reading()
    big = _cluster(base, "big", nodes)
    big.register_nodes()
    big.heartbeat()
    with_nodes = _reading()
    big_cost = _delta(with_nodes, one_cost, 1)
    one_alone = _delta(one_cost, start, 1)
    node = tuple((b - o) / (nodes - 1) for b, o in zip(big_cost, one_alone, strict=True))

    client = big.client()
    env = _env()
    spec: dict[str, Any] = {
        "name": "train",
        "script": SCRIPT,
        "workDir": "/tmp",
        "environment": env,
        "export": "ALL",
        "hold": True,
        "cpusPerTask": 1,
        "timeLimitS": 3600,
        "submitLine": "sbatch --gpus=1 train.sh",
    }
    t0 = time.perf_counter()
    ids = [str(client.submit_job({"spec": spec})["jobId"]) for _ in range(jobs)]  # type: ignore[typeddict-item]
    log(f"{jobs} held jobs submitted in {time.perf_counter() - t0:.1f} s")
    pending = _reading()
    per_pending = _delta(pending, with_nodes, jobs)

    client.call("UpdateJob", {"jobIds": ids, "action": "JOB_UPDATE_RELEASE"})
    big.settle()
    for job_id in ids:
        big.exit(job_id)
    big.settle()
    big.dispatcher.launched.clear()  # the harness's record of LaunchJobs: not ctld's
    big.cluster.purge_finished()  # the periodic sweep (min_job_age is not over)
    states = {big.cluster.jobs[int(i)].state for i in ids}
    finished = _reading()
    per_finished = _delta(finished, with_nodes, jobs)
    log(f"finished states: {states}")

    table = Table(
        "ctld memory per object (in-process ctld, SQLite store)",
        ["object", "traced bytes each", "malloc in use each", "RSS bytes each"],
    )
    table.add(f"node (of {nodes:,}, registered, heard)", *(f"{v:,.0f}" for v in node))
    table.add(f"pending job (of {jobs:,}, held)", *(f"{v:,.0f}" for v in per_pending))
    table.add(f"finished job (of {jobs:,}, COMPLETED, kept)", *(f"{v:,.0f}" for v in per_finished))
    env_bytes = sum(len(k) + len(v) for k, v in env.items())
    table.notes.append(
        f"a job's environment: {len(env)} variables, {env_bytes:,} bytes; its script "
        f"{len(SCRIPT)} bytes; load average {os.getloadavg()[0]:.1f}"
    )
    result.tables.append(table)
    result.data.update(
        node=node, pending=per_pending, finished=per_finished, rss_mib=finished[2] / (1 << 20)
    )
    return result


def rss_run(jobs: int) -> PhaseResult:
    """``--rss``: a real ctld (one node, as bench.side_by_side's) idle, then with
    ``jobs`` held jobs submitted over gRPC as sbatch would (this script, this
    environment), then with them cancelled: its RSS at each."""
    from bench.common import bench_cluster, submit_grpc
    from corral.wire import corral_pb2 as pb

    result = PhaseResult("ctld_rss", {"jobs": jobs})
    table = Table("ctld RSS (a real ctld, one node of 64 CPUs)", ["state", "RSS", "per job"])
    with bench_cluster("rss", nodes=1, cpus_per_node=64) as cluster:
        time.sleep(2)
        idle = cluster.rss_mib()
        table.add("idle, new store (alembic made it)", f"{idle:.0f} MiB", "")
        # a controller's usual start: its store already at head, alembic never imported
        cluster.stop_process("ctld")
        cluster.start_ctld()
        cluster.wait_nodes_up()
        time.sleep(2)
        idle = cluster.rss_mib()
        table.add("idle, restarted on its store", f"{idle:.0f} MiB", "")
        spec = pb.JobSpec(
            name="train",
            script=SCRIPT,
            work_dir=str(cluster.work_dir),
            environment=_env(),
            export="ALL",
            hold=True,
            time_limit_s=3600,
            submit_line="sbatch --gpus=1 train.sh",
        )
        run = asyncio.run(submit_grpc(cluster, jobs, 4, hold=True, spec=spec))
        time.sleep(2)
        held = cluster.rss_mib()
        table.add(f"{len(run.job_ids):,} held", f"{held:.0f} MiB", _per(held - idle, jobs))
        from bench.common import cancel_all

        cancel_all(cluster)
        time.sleep(2)
        after = cluster.rss_mib()
        table.add("0, after cancelling them", f"{after:.0f} MiB", _per(after - idle, jobs))
    table.notes.append(f"load average {os.getloadavg()[0]:.1f}")
    result.tables.append(table)
    result.data.update(idle=idle, held=held, after=after)
    return result


def _per(mib: float, n: int) -> str:
    return f"{mib * 1024 / n:.1f} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rss", action="store_true", help="a real ctld's RSS (idle, held jobs)")
    args = ap.parse_args()
    result = rss_run(args.jobs) if args.rss else run(args.nodes, args.jobs)
    print(result.render())
    save_result(result)


if __name__ == "__main__":
    main()
