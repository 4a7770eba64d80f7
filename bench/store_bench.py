"""The store on SQLite and PostgreSQL: durable submits/s and sacct over 100,000 jobs.

* Store alone: ``Store.commit(insert_job(...))`` with 1, 16 and 64 commits in flight
  (group commit: requests per transaction), on SQLite (WAL, synchronous=FULL) and on
  PostgreSQL (synchronous_commit=on, fsync=on): every counted submit is durable.
* Through ctld: gRPC SubmitJob, 16 in flight, held jobs, ctld on each store.
* sacct over 100,000 finished jobs stored (``-X -a`` over all of them: first line and
  total; ``-j ID``), and sreport's AccountUtilizationByUser over all of them, on each
  store.

PostgreSQL: the one of ``CORRAL_BENCH_PG_URL``, else a private server started with the
installed binaries (corral.testing.postgres). ``--quick`` uses 10,000 jobs for sacct.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    ANCHORS,
    SLURM,
    VENV_BIN,
    PhaseResult,
    Table,
    bench_cluster,
    log,
    ms,
    phase_main,
    submit_grpc_sync,
)
from corral.testing.postgres import TempPostgres
from corral.wire import corral_pb2 as pb
from ctld.storage.store import Store, insert_job


def _job(job_id: int, now: float, *, finished: bool) -> pb.Job:
    job = pb.Job(
        job_id=job_id,
        user=os.environ.get("USER", "root"),
        uid=os.getuid(),
        gid=os.getgid(),
        partition="debug",
        account="physics",
        qos="normal",
        submit_time=now - 3600,
        eligible_time=now - 3600,
        time_limit_s=3600,
        num_nodes=1,
        num_cpus=4,
        num_tasks=1,
        mem_mb=4096,
        num_gpus=1,
        cluster="corral",
        state=pb.JOB_STATE_PENDING,
    )
    job.spec.name = f"train-{job_id % 97}"
    job.spec.work_dir = "/tmp"
    job.spec.script = "#!/bin/sh\npython train.py\n"
    if finished:
        job.state = pb.JOB_STATE_COMPLETED
        job.start_time = now - 3000 + job_id % 600
        job.end_time = job.start_time + 60 + job_id % 900
        job.nodelist = job.batch_host = f"node0{1 + job_id % 2}"
        job.allocations.add(node=job.nodelist, cpus=4, mem_mb=4096, gpu_indices=[job_id % 8])
    job.events.add(time=job.submit_time, event="submitted", to_state=pb.JOB_STATE_PENDING)
    return job


async def _commits(store: Store, n: int, concurrency: int, first_id: int) -> float:
    ids = iter(range(first_id, first_id + n))
    now = time.time()

    async def worker() -> None:
        for job_id in ids:
            await store.commit(insert_job(_job(job_id, now, finished=False)))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


def store_runs(url: str, label: str, table: Table, data: dict[str, Any], quick: bool) -> None:
    store = Store(url)
    store.open()
    try:
        next_id = 1
        for concurrency, n in ((1, 300 if quick else 1000), (16, 2000), (64, 4000)):
            before = (store.requests, store.commits)
            elapsed = asyncio.run(_commits(store, n, concurrency, next_id))
            next_id += n
            reqs, commits = store.requests - before[0], store.commits - before[1]
            table.add(
                label,
                f"Store.commit, {concurrency} in flight",
                n,
                f"{n / elapsed:.0f}",
                f"{reqs / max(commits, 1):.1f}",
            )
            data[f"{label}_store_{concurrency}"] = {"n": n, "jobs_per_s": n / elapsed}
    finally:
        store.close()


def ctld_run(url: str, label: str, table: Table, data: dict[str, Any], quick: bool) -> None:
    n = 500 if quick else 2000
    with bench_cluster(f"store-{label}", store_url=url) as cluster:
        before = cluster.store_stats()
        run = submit_grpc_sync(cluster, n, 16, hold=True)
        after = cluster.store_stats()
        reqs = after["requests"] - before["requests"]
        commits = after["commits"] - before["commits"]
        table.add(
            label,
            "ctld gRPC SubmitJob, 16 in flight (held)",
            n,
            f"{run.jobs_per_s:.0f}",
            f"{reqs / max(commits, 1):.1f}",
        )
        data[f"{label}_ctld_16"] = {"n": n, "jobs_per_s": run.jobs_per_s, "errors": run.errors}


def _fill(url: str, n: int) -> None:
    async def fill() -> None:
        store = Store(url, sqlite_synchronous="NORMAL")
        store.open()
        now = time.time() - 86400  # finished yesterday: ctld does not load them
        try:
            for start in range(1, n + 1, 1000):
                ops = [
                    insert_job(_job(i, now, finished=True))
                    for i in range(start, min(start + 1000, n + 1))
                ]
                await store.commit(*ops)
        finally:
            store.close()

    asyncio.run(fill())


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds to the first line, seconds in all, lines)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    t_first = time.perf_counter() - t0
    rest = proc.stdout.read()
    proc.wait(600)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return t_first, total, (1 if first else 0) + rest.count(b"\n")


def sacct_runs(url: str, label: str, table: Table, data: dict[str, Any], quick: bool) -> None:
    n = 10_000 if quick else 100_000
    log(f"sacct {label}: storing {n} finished jobs")
    t0 = time.perf_counter()
    _fill(url, n)
    log(f"sacct {label}: stored in {time.perf_counter() - t0:.1f} s")
    with bench_cluster(f"sacct-{label}", store_url=url) as cluster:
        env = {**cluster.env(), "CORRAL_TIMEOUT": "600"}  # the whole table is one answer
        sacct = str(VENV_BIN / "sacct")
        runs = [
            ("sacct -X -a -S 2000-01-01 (all)", ["-X", "-a", "-S", "2000-01-01"], n),
            ("sacct -j ID", ["-j", str(n // 2)], 1),
        ]
        for name, args, want in runs:
            best: tuple[float, float, int] | None = None
            for _ in range(1 if quick or want > 1 else 3):  # over all jobs: once (minutes)
                got = _timed([sacct, *args], env)
                best = got if best is None or got[1] < best[1] else best
            assert best is not None
            first, total, lines = best
            jobs = max(lines - 2, 0)  # the header's two lines
            ref = {1: ANCHORS["sacct_j"]}.get(want, "348 ms (-X over 10,613 jobs)")
            table.add(
                label,
                f"{name}: first line {ms(first)}, total {ms(total)}",
                jobs,
                f"{jobs / total:.0f} lines/s",
                f"{SLURM}: {ref}",
            )
            data[f"{label}_{'all' if want > 1 else 'j'}"] = {
                "first_s": first,
                "total_s": total,
                "jobs": jobs,
            }
        # sreport adds up every stored run of the window in ctld (ReportUsage)
        sreport = [
            str(VENV_BIN / "sreport"),
            "-n",
            "-P",
            "cluster",
            "AccountUtilizationByUser",
            "start=2000-01-01",
            "end=now",
        ]
        best_s = min(_timed(sreport, env)[1] for _ in range(1 if quick else 3))
        table.add(
            label,
            f"sreport cluster AccountUtilizationByUser (all): {ms(best_s)}",
            n,
            f"{n / best_s:.0f} jobs/s",
            f"{SLURM}: n/a (rollups)",
        )
        data[f"{label}_sreport"] = {"total_s": best_s, "jobs": n}


def run(quick: bool = False) -> PhaseResult:
    result = PhaseResult("store", {"stores": "SQLite WAL FULL, PostgreSQL 15 (fsync on)"})
    submits = Table("Durable submits", ["store", "path", "jobs", "jobs/s", "requests per commit"])
    submits.notes.append(
        "SQLite's figure is today's store code path; PostgreSQL on the same machine, "
        "over TCP on loopback, synchronous_commit=on"
    )
    sacct = Table(
        "sacct over stored jobs", ["store", "command", "jobs", "rate", "real Slurm 22.05"]
    )
    pg: TempPostgres | None = None
    pg_url = os.environ.get("CORRAL_BENCH_PG_URL", "")
    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-store-"))
    try:
        if not pg_url:
            pg = TempPostgres.start()
            pg_url = pg.url if pg else ""
        stores = [("sqlite", lambda tag: f"sqlite:///{tmp}/{tag}.db")]
        if pg_url:
            stores.append(("postgresql", lambda tag: _pg_database(pg_url, tag)))
        else:
            log("no PostgreSQL: SQLite only")
        for label, make in stores:
            store_runs(make("store"), label, submits, result.data, quick)
            ctld_run(make("ctld"), label, submits, result.data, quick)
            sacct_runs(make("sacct"), label, sacct, result.data, quick)
    finally:
        if pg is not None:
            pg.remove()
    result.tables += [submits, sacct]
    return result


def _pg_database(admin: str, name: str) -> str:
    """A fresh database ``bench_<name>`` on the server of ``admin``."""
    import sqlalchemy as sa

    from ctld.storage.store import normalize_url

    engine = sa.create_engine(normalize_url(admin), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS bench_{name}"))
        conn.execute(sa.text(f"CREATE DATABASE bench_{name}"))
    engine.dispose()
    return admin.rsplit("/", 1)[0] + f"/bench_{name}"


if __name__ == "__main__":
    phase_main(run)
