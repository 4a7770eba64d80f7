"""The store's group commit: concurrent requests share transactions, failures stay isolated."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
import sqlalchemy as sa

from corral.errors import StoreError
from corral.wire import corral_pb2 as pb
from ctld.store import Store, insert_job, jobs


def job(job_id: int) -> pb.Job:
    j = pb.Job(job_id=job_id, user="u", state=pb.JOB_STATE_PENDING)
    j.events.add(event="submitted", to_state=pb.JOB_STATE_PENDING, cause="test")
    return j


async def test_concurrent_commits_are_grouped(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.open()
    try:
        await asyncio.gather(*(store.commit(insert_job(job(i))) for i in range(1, 501)))
        assert store.requests == 500
        assert store.commits < 500  # batched: fewer transactions than requests
        loaded = store.load_jobs(active_states=[pb.JOB_STATE_PENDING], finished_after=0)
        assert len(loaded) == 500 and all(len(j.events) == 1 for j in loaded)
        assert store.next_job_id() == 501
    finally:
        store.close()


async def test_a_failing_request_does_not_sink_its_batch(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.open()
    try:
        await store.commit(insert_job(job(1)))
        results = await asyncio.gather(
            store.commit(insert_job(job(2))),
            store.commit(insert_job(job(1))),  # duplicate
            store.commit(insert_job(job(3))),
            return_exceptions=True,
        )
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], StoreError)
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 3
    finally:
        store.close()


def test_schema_version_mismatch_is_refused(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.open()
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE meta SET value='99' WHERE key='schema_version'"))
    store.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(f"sqlite:///{tmp_path}/s.db").open()


def test_the_store_file_is_private(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/c.db", sqlite_synchronous="NORMAL")
    store.open()
    try:
        assert (tmp_path / "c.db").stat().st_mode & 0o777 == 0o600
    finally:
        store.close()
