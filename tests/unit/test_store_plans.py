"""sacct's store queries use the jobs table's indexes (migration 0006): each common
filter (time window, user, account, state, end time) is read through an index, never
by scanning the table, as SQLite plans them (EXPLAIN QUERY PLAN of the statements
``Store.query_jobs`` actually runs); the answers are the same as without the window's
job-id bound, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
import sqlalchemy as sa

from corral.wire import corral_pb2 as pb
from ctld.storage.store import Store, insert_job

NOW = 10_000_000.0
N = 400


def _job(job_id: int) -> pb.Job:
    """Jobs ending in id order over 400 hours; every 50th still running."""
    j = pb.Job(
        job_id=job_id,
        user=f"u{job_id % 7}",
        account=f"a{job_id % 5}",
        partition="p",
        submit_time=NOW - (N - job_id) * 3600 - 60,
        start_time=NOW - (N - job_id) * 3600 - 30,
    )
    if job_id % 50:
        j.state = pb.JOB_STATE_FAILED if job_id % 3 == 0 else pb.JOB_STATE_COMPLETED
        j.end_time = NOW - (N - job_id) * 3600
    else:
        j.state = pb.JOB_STATE_RUNNING
    return j


def _filled(url: str) -> Store:
    store = Store(url, sqlite_synchronous="NORMAL")
    store.open()

    async def fill() -> None:
        await store.commit(*(insert_job(_job(i)) for i in range(1, N + 1)))

    asyncio.run(fill())
    return store


def _query(store: Store, **kw: Any) -> list[int]:
    args: dict[str, Any] = {
        "job_ids": [],
        "users": [],
        "states": [],
        "start_after": 0.0,
        "end_before": 0.0,
        "limit": 0,
    }
    args.update(kw)
    return [j.job_id for j in store.query_jobs(**args)]


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("window", {"start_after": NOW - 24 * 3600}, "ix_jobs_end_id"),
    ("user", {"start_after": NOW - 24 * 3600, "users": ["u3"]}, "ix_jobs_user_end"),
    ("account", {"start_after": 1.0, "accounts": ["a2"]}, "ix_jobs_account_end"),
    (
        "state",
        {"start_after": NOW - 24 * 3600, "states": [int(pb.JOB_STATE_FAILED)]},
        "ix_jobs_state_end",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "flt", "index"), CASES, ids=[c[0] for c in CASES])
def test_sacct_filters_are_read_through_an_index(
    tmp_path: pathlib.Path, name: str, flt: dict[str, Any], index: str
) -> None:
    store = _filled(f"sqlite:///{tmp_path / 'plans.db'}")
    seen: list[tuple[str, Any]] = []

    def remember(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            seen.append((statement, params))

    sa.event.listen(store.engine, "before_cursor_execute", remember)
    try:
        _query(store, limit=200, **flt)
        sa.event.remove(store.engine, "before_cursor_execute", remember)
        plans = []
        with store.engine.connect() as conn:
            for statement, params in seen:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
                plans.append([str(r[-1]) for r in rows])
    finally:
        store.close()
    assert seen, "query_jobs ran no statement on jobs"
    lines = [line for plan in plans for line in plan]
    assert any(index in line for line in lines), (name, plans)
    # a bare "SCAN jobs" reads every row; an index's range or its order is fine
    assert not [line for line in lines if line.strip() == "SCAN jobs"], (name, plans)


@pytest.mark.timeout(120)
def test_the_window_bound_changes_no_answer(store_url: str) -> None:
    store = _filled(store_url)
    try:
        day = NOW - 24 * 3600
        got = _query(store, start_after=day)
        want = [i for i in range(1, N + 1) if _job(i).end_time == 0 or _job(i).end_time >= day]
        assert got == want
        # paged as sacct pages: after a job id, a page at a time
        first = _query(store, start_after=day, limit=5)
        rest = _query(store, start_after=day, after_job_id=first[-1])
        assert first + rest == want
        assert _query(store, start_after=NOW + 1) == [
            i for i in range(1, N + 1) if not _job(i).end_time
        ]
        assert _query(store, start_after=day, job_ids=[50, 1]) == [50]
        mine = _query(store, start_after=1.0, users=["u3"], states=[int(pb.JOB_STATE_FAILED)])
        assert mine == [i for i in range(1, N + 1) if i % 7 == 3 and i % 3 == 0 and i % 50]
    finally:
        store.close()
