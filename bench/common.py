"""What every bench phase shares: clusters, gRPC submits, timing, tables, results.

Tables are plain-text Markdown. Each phase returns a ``PhaseResult``; ``run_all``
prints it and writes it as JSON under bench/results/ (git-ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.testing.cluster import ClusterFactory, LocalCluster

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python")
PROBE = BENCH / "ctld_probe.py"

SLURM = "Slurm 22.05 (anchors README)"
FLOOR = "Python floor (anchors README)"

# Figures for real Slurm 22.05 and the Python stack on this machine, from
# /work/shared/anchors/slurm/README.md (medians).
ANCHORS: dict[str, str] = {
    "sbatch_call": "8-10 ms",
    "sbatch_held_1": "120 jobs/s",
    "sbatch_held_2": "209 jobs/s",
    "sbatch_held_4": "227 jobs/s",
    "sbatch_running_1": "63 jobs/s",
    "latency_p50": "2.92 s (0.76 s with batch_sched_delay=0)",
    "e2e_1000": "21 jobs/s (30 with batch_sched_delay=0)",
    "squeue_0": "8 ms",
    "squeue_1000": "26 ms",
    "squeue_5000": "101 ms",
    "sinfo_5000": "7 ms",
    "rss_0": "12 MiB",
    "rss_1000": "16 MiB",
    "rss_5000": "36 MiB",
    "sacct_j": "96 ms",
    "python_pass": "21-25 ms",
    "import_grpc": "175-205 ms",
    "grpc_seq": "1,000-1,200 calls/s",
    "grpc_16": "~2,000 calls/s",
    "sqlite_full": "3,300 commits/s (one row each, synchronous=FULL)",
}

ACTIVE_STATES = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_COMPLETING"]


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays the tables."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- statistics


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "p95": percentile(samples, 95),
        "min": min(samples),
        "max": max(samples),
        "mean": statistics.fmean(samples),
    }


def ms(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "n/a"
    return f"{seconds * 1000:.1f} ms"


def secs(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "n/a"
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else math.nan


# ---------------------------------------------------------------- tables and results


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])

    def render(self) -> str:
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(cells)) + " |"

        out = [f"### {self.title}", "", line(self.headers)]
        out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        out.extend(line(r) for r in self.rows)
        if self.notes:
            out.append("")
            out.extend(f"- {n}" for n in self.notes)
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headers": self.headers,
            "rows": self.rows,
            "notes": self.notes,
        }


@dataclass
class PhaseResult:
    phase: str
    config: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def render(self) -> str:
        head = f"## {self.phase}\n\n"
        if self.config:
            head += "Config: " + ", ".join(f"{k}={v}" for k, v in self.config.items()) + "\n\n"
        return head + "\n".join(t.render() for t in self.tables)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "config": self.config,
            "elapsed_s": self.elapsed_s,
            "tables": [t.to_json() for t in self.tables],
            "data": self.data,
        }


def save_result(result: PhaseResult, stamp: str | None = None) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{result.phase}-{stamp}.json"
    text = json.dumps(result.to_json(), indent=2, default=str)
    path.write_text(text)
    (RESULTS / f"{result.phase}-latest.json").write_text(text)
    return path


def phase_main(run: Callable[[bool], PhaseResult]) -> None:
    """``main`` of a phase module run on its own: ``python -m bench.X [--quick]``."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples, smaller runs")
    args = parser.parse_args()
    t0 = time.monotonic()
    result = run(args.quick)
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)}")


# ---------------------------------------------------------------- clusters


class BenchCluster(LocalCluster):
    """LocalCluster whose ctld is bench/ctld_probe.py: ctld plus read-only counters."""

    cprofile: str = ""
    switchinterval: float = 0.0
    log_level: str = ""

    def start_ctld(self, timeout: float = 30.0, index: int = 0) -> None:
        if index:
            raise ValueError("the bench cluster runs one controller")
        ready = self.state_dir / "run" / "ctld.ready"
        ready.unlink(missing_ok=True)
        probe_opts = {
            "cprofile": self.cprofile,
            "switchinterval": self.switchinterval,
            "log_level": self.log_level,
        }
        (self.state_dir / "bench-probe.json").write_text(json.dumps(probe_opts))
        self._spawn("ctld", [str(PROBE), "-f", str(self.config_path), "--ready-file", str(ready)])
        self._wait_file(ready, "ctld", timeout)

    @property
    def ctld_pid(self) -> int:
        return self.procs["ctld"].pid

    @property
    def work_dir(self) -> Path:
        """Where jobs run and write their output (never the repository)."""
        path = self.state_dir / "work"
        path.mkdir(exist_ok=True)
        return path

    def rss_mib(self) -> float:
        import psutil

        return float(psutil.Process(self.ctld_pid).memory_info().rss) / (1 << 20)

    def store_stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """The probe's counters (group commit, scheduler passes), read via SIGUSR2."""
        path = self.state_dir / "run" / "ctld.stats.json"
        before = -1
        with contextlib.suppress(OSError, ValueError):
            before = int(json.loads(path.read_text())["seq"])
        os.kill(self.ctld_pid, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, KeyError):
                data: dict[str, Any] = json.loads(path.read_text())
                if int(data["seq"]) > before:
                    return data
            time.sleep(0.005)
        return {}


@contextlib.contextmanager
def bench_cluster(
    name: str,
    *,
    nodes: int = 2,
    cpus_per_node: int = 16,
    cprofile: str = "",
    switchinterval: float = 0.0,
    log_level: str = "",
    **kw: Any,
) -> Iterator[BenchCluster]:
    """A fresh cluster in a private temp dir, on free ports; stopped and removed after
    (corral.testing's ClusterFactory, as the tests' fixtures)."""

    def configure(c: Any) -> None:
        c.cprofile = cprofile
        c.switchinterval = switchinterval
        c.log_level = log_level

    factory = ClusterFactory(BenchCluster, prefix=f"corral-bench-{name}-")
    factory.keep = bool(os.environ.get("CORRAL_BENCH_KEEP"))
    log(f"{name}: starting cluster ({nodes} nodes x {cpus_per_node} CPUs) in {factory.base}")
    try:
        cluster = factory(
            configure,
            nodes=nodes,
            cpus_per_node=cpus_per_node,
            python=PYTHON,
            kill_wait_s=kw.pop("kill_wait_s", 5.0),
            **kw,
        )
        assert isinstance(cluster, BenchCluster)
        yield cluster
    finally:
        factory.close(logs=False)
        if factory.keep:
            log(f"{name}: kept {factory.base}")


def group_commit(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Requests per commit between two probe readings."""
    if not before or not after or before.get("commits") is None:
        return {"commits": None, "requests": None, "ratio": None}
    commits = int(after["commits"]) - int(before["commits"])
    requests = int(after["requests"]) - int(before["requests"])
    return {
        "commits": commits,
        "requests": requests,
        "ratio": requests / commits if commits else None,
        "passes": int(after["passes"]) - int(before["passes"]),
        "snapshot_s": float(after["snapshot_s"]) - float(before["snapshot_s"]),
        "plan_s": float(after["plan_s"]) - float(before["plan_s"]),
    }


def ratio_text(gc: dict[str, Any]) -> str:
    if gc.get("ratio") is None:
        return "n/a"
    return f"{gc['ratio']:.1f} ({gc['requests']}/{gc['commits']})"


# ---------------------------------------------------------------- gRPC


def trivial_spec(work_dir: Path | str, *, hold: bool = False, name: str = "bench") -> Any:
    from corral.wire import corral_pb2 as pb

    return pb.JobSpec(
        name=name,
        script="#!/bin/sh\ntrue\n",
        work_dir=str(work_dir),
        stdout_pattern="/dev/null",
        environment={"PATH": "/usr/bin:/bin", "HOME": str(work_dir)},
        export="ALL",
        hold=hold,
        submit_line="bench",
    )


def grpc_metadata(cluster: LocalCluster) -> list[tuple[str, str]]:
    """A token for this process's user: gRPC gives ctld no kernel identity."""
    return cluster.grpc_metadata()


@dataclass
class SubmitRun:
    n: int
    concurrency: int
    elapsed_s: float
    latencies_s: list[float]
    job_ids: list[int]
    errors: int

    @property
    def jobs_per_s(self) -> float:
        return rate(len(self.job_ids), self.elapsed_s)


async def submit_grpc(
    cluster: BenchCluster,
    n: int,
    concurrency: int,
    *,
    hold: bool,
    name: str = "bench",
    spec: Any = None,
) -> SubmitRun:
    """``n`` SubmitJob calls over one grpc.aio channel, ``concurrency`` in flight
    (``spec``: the job's, else a trivial one)."""
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    md = grpc_metadata(cluster)
    request = pb.SubmitJobRequest(spec=spec or trivial_spec(cluster.work_dir, hold=hold, name=name))
    latencies: list[float] = []
    ids: list[int] = []
    errors = [0]
    remaining = [n]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        await stub.GetClusterInfo(pb.GetClusterInfoRequest(), metadata=md)  # connect first

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                t0 = time.perf_counter()
                try:
                    reply = await stub.SubmitJob(request, metadata=md, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    errors[0] += 1
                    if errors[0] <= 3:
                        log(f"SubmitJob failed: {exc.code()} {exc.details()}")
                    continue
                latencies.append(time.perf_counter() - t0)
                ids.append(int(reply.job_id))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return SubmitRun(n, concurrency, elapsed, latencies, ids, errors[0])


def submit_grpc_sync(
    cluster: BenchCluster, n: int, concurrency: int, *, hold: bool, name: str = "bench"
) -> SubmitRun:
    return asyncio.run(submit_grpc(cluster, n, concurrency, hold=hold, name=name))


def cancel_all(cluster: BenchCluster) -> int:
    """Cancel every active job of ours (between runs, so queues start empty)."""
    from corral.identity import current_identity

    reply = cluster.client().cancel_jobs(
        {"filter": {"users": [current_identity().user], "states": ACTIVE_STATES}}
    )
    return len(reply.get("outcomes", []))


def count_jobs(cluster: BenchCluster, states: list[str]) -> int:
    reply = cluster.client().get_jobs({"filter": {"states": states}})
    return len(reply.get("jobs", []))


# ---------------------------------------------------------------- commands


def command_missing(name: str) -> str | None:
    """Why ``name`` cannot run (no console script, or its module not there), else None."""
    script = VENV_BIN / name
    if not script.exists():
        return "n/a (not installed)"
    with contextlib.suppress(OSError):
        for line in script.read_text().splitlines():
            if line.startswith("from ") and " import " in line:
                module = line.split()[1]
                if importlib.util.find_spec(module) is None:
                    return "n/a (not installed)"
                break
    return None


def run_cmd(
    argv: Sequence[str], env: dict[str, str], cwd: Path | str
) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        list(argv), env=env, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return time.perf_counter() - t0, proc


def time_cmd(
    argv: Sequence[str], env: dict[str, str], cwd: Path | str, runs: int, warmup: int = 1
) -> tuple[list[float], str | None]:
    """Wall times of ``runs`` runs (after ``warmup``); the error text of a failing run."""
    samples: list[float] = []
    for i in range(warmup + runs):
        dt, proc = run_cmd(argv, env, cwd)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            return samples, f"error (rc={proc.returncode}: {tail[0][:120]})"
        if i >= warmup:
            samples.append(dt)
    return samples, None
