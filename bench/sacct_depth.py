"""sacct at depth: ``sacct -X`` over 10,000 and 100,000 finished jobs, and the store's
query alone, on SQLite (and PostgreSQL with ``CORRAL_BENCH_PG_URL``).

    .venv/bin/python -m bench.sacct_depth                 # 10k and 100k
    .venv/bin/python -m bench.sacct_depth --jobs 10000    # one depth

The history is ten days of finished jobs (20 users, 10 accounts, COMPLETED / FAILED /
TIMEOUT), the last tenth of them ended today. For each depth:

- the store alone (``Store.query_jobs``, paged as sacct pages: 200 then 5,000 a call),
  so the index's share is seen without the RPC and the command: today's jobs (the
  window sacct uses by default), one user's, one account's, FAILED only, all of them;
- the command: ``sacct -X -a -S <today>`` (the day's jobs) and ``sacct -X -a -S <10 days
  ago>`` (every job) through a real ctld (bench/store_bench.py's cluster and timing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import VENV_BIN, PhaseResult, Table, bench_cluster, log, ms, save_result
from bench.store_bench import _job, _timed
from corral.wire import corral_pb2 as pb
from ctld.storage.store import Store, insert_job

NO_MASK_ENV = "CORRAL_NO_FIELD_MASK"  # client/fieldmasks.py (a literal: runs on older trees)
DAYS = 10
USERS = [f"user{i:02d}" for i in range(20)]
ACCOUNTS = [f"acct{i}" for i in range(10)]
ENDS = [pb.JOB_STATE_COMPLETED] * 8 + [pb.JOB_STATE_FAILED, pb.JOB_STATE_TIMEOUT]


def _history_job(job_id: int, n: int, now: float) -> pb.Job:
    """Job ``job_id`` of ``n``, ids in end order over DAYS days ending ``now``."""
    ended = now - DAYS * 86400 * (1 - job_id / n)
    job = _job(job_id, ended, finished=True)
    job.user = USERS[job_id % len(USERS)]
    job.account = ACCOUNTS[job_id % len(ACCOUNTS)]
    job.state = ENDS[job_id % len(ENDS)]
    job.submit_time = job.eligible_time = ended - 3600
    job.start_time = ended - 1800
    job.end_time = ended
    return job


def fill(url: str, n: int, now: float) -> None:
    async def go() -> None:
        store = Store(url, sqlite_synchronous="NORMAL")
        store.open()
        try:
            for start in range(1, n + 1, 2000):
                stop = min(start + 2000, n + 1)
                await store.commit(
                    *(insert_job(_history_job(i, n, now)) for i in range(start, stop))
                )
        finally:
            store.close()

    asyncio.run(go())


def _paged(store: Store, **flt: Any) -> tuple[float, int]:
    """(seconds, jobs) for one sacct's worth of pages of ``Store.query_jobs``."""
    base: dict[str, Any] = {"job_ids": [], "users": [], "states": [], "end_before": 0}
    base.update(flt)
    t0 = time.perf_counter()
    after, size, total = 0, 200, 0
    while True:
        page = store.query_jobs(**base, limit=size, after_job_id=after)
        total += len(page)
        if len(page) < size:
            return time.perf_counter() - t0, total
        after, size = page[-1].job_id, 5000


def store_alone(url: str, n: int, now: float, table: Table, data: dict[str, Any]) -> None:
    today = now - 86400
    store = Store(url)
    store.open()
    try:
        cases = [
            ("today's jobs (-S today)", {"start_after": today}),
            ("one user's, today", {"start_after": today, "users": [USERS[3]]}),
            ("one account's, today", {"start_after": today, "accounts": [ACCOUNTS[4]]}),
            ("FAILED, today", {"start_after": today, "states": [int(pb.JOB_STATE_FAILED)]}),
            ("one user's, all days", {"start_after": 1.0, "users": [USERS[3]]}),
            ("every job (-S 10 days ago)", {"start_after": 1.0}),
        ]
        for name, flt in cases:
            best = min((_paged(store, **flt) for _ in range(3)), key=lambda r: r[0])
            table.add(f"{n:,}", name, best[1], ms(best[0]))
            data[f"store_{n}_{name}"] = {"s": best[0], "jobs": best[1]}
    finally:
        store.close()


def command(url: str, n: int, now: float, table: Table, data: dict[str, Any]) -> None:
    day = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - 86400))
    first = time.strftime("%Y-%m-%d", time.localtime(now - (DAYS + 1) * 86400))
    with bench_cluster(f"sacct-depth-{n}", store_url=url) as cluster:
        env = {**cluster.env(), "CORRAL_TIMEOUT": "600"}
        sacct = str(VENV_BIN / "sacct")
        for name, args in (
            ("sacct -X -a -S <a day ago>", ["-X", "-a", "-S", day]),
            ("sacct -X -a -S <10 days ago> (all)", ["-X", "-a", "-S", first]),
        ):
            # "before": every field (CORRAL_NO_FIELD_MASK=1, what sacct asked for until
            # issue 29); "after": the field mask of the columns printed; interleaved
            tries = 3 if n <= 10_000 or "day ago" in name else 1
            runs: dict[str, list[tuple[float, float, int]]] = {"before": [], "after": []}
            for _ in range(tries):
                runs["before"].append(_timed([sacct, *args], {**env, NO_MASK_ENV: "1"}))
                runs["after"].append(_timed([sacct, *args], env))
            for label, timings in runs.items():
                first_s, total, lines = min(timings, key=lambda r: r[1])
                jobs = max(lines - 2, 0)
                per_row = total / max(jobs, 1) * 1e6
                table.add(f"{n:,}", name, label, jobs, ms(first_s), ms(total), f"{per_row:.0f} us")
                data[f"cmd_{n}_{name}_{label}"] = {
                    "first_s": first_s,
                    "total_s": total,
                    "jobs": jobs,
                }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", default="10000,100000", help="depths, comma-separated")
    ap.add_argument("--no-command", action="store_true", help="the store alone")
    args = ap.parse_args()
    result = PhaseResult("sacct_depth", {"load": os.getloadavg()[0]})
    alone = Table("Store.query_jobs alone (sacct's paging)", ["jobs", "query", "rows", "time"])
    cmd = Table(
        "sacct through ctld",
        ["jobs", "command", "mask", "rows", "first line", "total", "per row"],
    )
    urls = []
    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-sacct-"))
    urls.append(("sqlite", lambda tag: f"sqlite:///{tmp}/{tag}.db"))
    now = time.time()
    for n in [int(x) for x in args.jobs.split(",")]:
        for label, make in urls:
            url = make(f"h{n}")
            log(f"{label}: storing {n} finished jobs")
            fill(url, n, now)
            store_alone(url, n, now, alone, result.data)
            if not args.no_command:
                command(url, n, now, cmd, result.data)
    load = os.getloadavg()
    note = (
        f"SQLite; load average {result.config['load']:.1f} at the start, {load[0]:.1f} at the end"
    )
    alone.notes.append(note)
    cmd.notes.append(note)
    result.tables += [alone, cmd]
    for t in result.tables:
        print(t.render())
    save_result(result)


if __name__ == "__main__":
    main()
