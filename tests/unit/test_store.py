"""The store on SQLite and PostgreSQL: group commit, isolated failures, the schema's
revisions (migrations from an empty database and from the pre-migration schema), and a
database that goes away and comes back."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import sqlalchemy as sa

from corral.errors import StoreError, StoreUnavailable
from corral.wire import corral_pb2 as pb
from ctld.storage import migrate
from ctld.storage.store import (
    NodeDrain,
    Op,
    Store,
    insert_job,
    jobs,
    metadata,
    normalize_url,
    update_job,
)
from tests.unit.legacy import store_v1


def job(job_id: int, **kw: Any) -> pb.Job:
    j = pb.Job(job_id=job_id, user="u", state=pb.JOB_STATE_PENDING, **kw)
    j.events.add(event="submitted", to_state=pb.JOB_STATE_PENDING, cause="test")
    return j


def count_jobs(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() or 0)


async def test_concurrent_commits_are_grouped(store_url: str) -> None:
    store = Store(store_url)
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


async def test_a_failing_request_does_not_sink_its_batch(store_url: str) -> None:
    store = Store(store_url)
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
        assert not isinstance(results[1], StoreUnavailable)  # a bad row, not a lost database
        assert store.available
        assert count_jobs(store) == 3
    finally:
        store.close()


async def test_every_kind_of_row_round_trips(store_url: str) -> None:
    store = Store(store_url)
    store.open()
    try:
        j = job(7, account="physics", partition="gpu", submit_time=1.5)
        await store.commit(insert_job(j))
        j.state, j.start_time, j.end_time = pb.JOB_STATE_COMPLETED, 2.0, 9.0
        ev = j.events.add(event="ended", to_state=pb.JOB_STATE_COMPLETED, cause="node:n1")
        await store.commit(
            update_job(j, [ev]),
            Op(
                reservations_put=[pb.Reservation(name="maint", end_time=5.0, nodes="n1")],
                drains_put=[NodeDrain("n2", "bad gpu", 3.0, 0)],
            ),
        )
        (back,) = store.query_jobs(
            job_ids=[7], users=["u"], states=[], start_after=0, end_before=0, limit=0
        )
        assert back.account == "physics" and back.end_time == 9.0
        (full,) = store.load_jobs(active_states=[], finished_after=0)
        assert [e.event for e in full.events] == ["submitted", "ended"]
        assert [r.name for r in store.load_reservations()] == ["maint"]
        assert store.load_drains() == [NodeDrain("n2", "bad gpu", 3.0, 0)]
        assert [x.job_id for x in store.finished_since(1.0)] == [7]
    finally:
        store.close()


def test_the_store_file_is_private(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/c.db", sqlite_synchronous="NORMAL")
    store.open()
    try:
        assert (tmp_path / "c.db").stat().st_mode & 0o777 == 0o600
    finally:
        store.close()


def test_postgres_urls_mean_psycopg3() -> None:
    assert normalize_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:////x.db") == "sqlite:////x.db"
    assert Store("postgresql://u:secret@h/db").url == "postgresql+psycopg://u:***@h/db"
    with pytest.raises(StoreError, match="only sqlite:///PATH and postgresql://"):
        Store("mysql://u:secret@h/db")
    with pytest.raises(StoreError, match="not a database URL"):
        Store("corral.db")


# ------------------------------------------------------------ schema revisions


def test_an_empty_database_is_made_at_head_and_matches_the_code(store_url: str) -> None:
    store = Store(store_url)
    store.open()
    try:
        with store.engine.connect() as conn:
            assert migrate.current(conn) == migrate.head()
            # the migrations make exactly the tables, columns and indexes the code uses
            from alembic.autogenerate import compare_metadata
            from alembic.runtime.migration import MigrationContext

            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == []
    finally:
        store.close()


def test_the_revisions_read_from_the_files_are_alembics() -> None:
    # ctld reads them without importing alembic: the same chain and head alembic sees
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate._config())
    assert migrate.head() == script.get_current_head()
    assert migrate.revisions() == {r.revision: r.down_revision for r in script.walk_revisions()}
    assert migrate.known(migrate.BASELINE) and not migrate.known("nosuch")


def test_a_store_at_head_is_opened_without_importing_alembic(tmp_path: pathlib.Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    opened(url)  # made at head (alembic runs once, in that process)
    code = (
        "import sys; from ctld.storage.store import Store\n"
        "s = Store(sys.argv[1]); s.open(); s.close()\n"
        "print(any(m == 'alembic' or m.startswith('alembic.') for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def opened(url: str) -> None:
    store = Store(url)
    store.open()
    store.close()


def test_an_unknown_revision_is_refused(store_url: str) -> None:
    opened(store_url)
    engine = sa.create_engine(normalize_url(store_url))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    with pytest.raises(StoreError, match="revision f00d, which this ctld does not know"):
        opened(store_url)


def make_v1_store(url: str) -> None:
    """A store as the code before migrations made it, with a job, a reservation, a drain."""

    async def fill() -> None:
        old = store_v1.Store(normalize_url(url))
        old.open()
        try:
            j = job(1, account="physics", submit_time=10.0)
            await old.commit(store_v1.insert_job(j))
            j.state, j.end_time = pb.JOB_STATE_COMPLETED, 20.0
            ev = j.events.add(event="ended", to_state=pb.JOB_STATE_COMPLETED, cause="node:n1")
            await old.commit(store_v1.update_job(j, [ev]))
            await old.commit(store_v1.insert_job(job(2)))
            await old.commit(
                store_v1.Op(
                    reservations_put=[pb.Reservation(name="r", end_time=99.0)],
                    drains_put=[store_v1.NodeDrain("n1", "why", 1.0, 0)],
                )
            )
        finally:
            old.close()

    asyncio.run(fill())


def db_upgrade(url: str) -> subprocess.CompletedProcess[str]:
    corral = pathlib.Path(sys.executable).parent / "corral"
    return subprocess.run(
        [str(corral), "db", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_pre_migration_schema_is_refused_then_upgraded_with_its_data(store_url: str) -> None:
    make_v1_store(store_url)
    with pytest.raises(StoreError, match=r"revision 0001, this ctld needs .*corral db upgrade"):
        opened(store_url)
    done = db_upgrade(store_url)
    assert done.returncode == 0, done.stderr
    assert f"from 0001 to {migrate.head()}" in done.stdout
    store = Store(store_url)
    store.open()
    try:
        loaded = {
            j.job_id: j
            for j in store.load_jobs(active_states=[pb.JOB_STATE_PENDING], finished_after=0)
        }
        assert sorted(loaded) == [1, 2]
        assert loaded[1].account == "physics" and loaded[1].end_time == 20.0
        assert [e.event for e in loaded[1].events] == ["submitted", "ended"]
        assert [r.name for r in store.load_reservations()] == ["r"]
        assert [d.name for d in store.load_drains()] == ["n1"]
        assert store.next_job_id() == 3
    finally:
        store.close()
    again = db_upgrade(store_url)  # at head already: nothing to do, still fine
    assert again.returncode == 0 and "already at" in again.stdout


def test_db_upgrade_makes_an_empty_database(store_url: str) -> None:
    done = db_upgrade(store_url)
    assert done.returncode == 0, done.stderr
    assert f"from nothing to {migrate.head()}" in done.stdout
    opened(store_url)


def test_db_upgrade_names_what_is_wrong(tmp_path: pathlib.Path) -> None:
    done = db_upgrade("nosuchdb://x")
    assert done.returncode == 1
    assert "corral db: error:" in done.stderr and "nosuchdb" in done.stderr


# ------------------------------------------------------------ store trouble


async def test_a_full_disk_refuses_changes_keeps_state_whole_and_recovers(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite's max_page_count stands in for a full disk: SQLITE_FULL, as a real one."""
    store = Store(f"sqlite:///{tmp_path}/s.db", probe_interval_s=0.05)
    limit = {"pages": 0}

    @sa.event.listens_for(store.engine, "connect")
    def _cap(dbapi_conn: Any, _record: Any) -> None:
        if limit["pages"]:
            dbapi_conn.execute(f"PRAGMA max_page_count={limit['pages']}")

    store.open()
    try:
        await store.commit(insert_job(job(1)))
        with store.engine.connect() as conn:
            pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)
        limit["pages"] = pages + 2
        store.engine.dispose()
        big = "x" * 20000
        acked: list[int] = []
        refused: list[int] = []
        for i in range(2, 40):
            try:
                await store.commit(insert_job(job(i, reason=big)))
                acked.append(i)
            except StoreUnavailable as exc:
                assert "the store is unavailable" in exc.message
                assert "full" in exc.message
                refused.append(i)
        assert refused and not store.available
        # a change to a job ctld holds in memory, refused now, is written on return
        one = job(1)
        one.state = pb.JOB_STATE_CANCELLED
        ev = one.events.add(event="cancelled", to_state=pb.JOB_STATE_CANCELLED, cause="t")
        with pytest.raises(StoreUnavailable):
            await store.commit(update_job(one, [ev]))
        assert count_jobs(store) == 1 + len(acked)  # exactly the acknowledged ones
        limit["pages"] = 0  # space again
        deadline = asyncio.get_running_loop().time() + 10
        while not store.available:
            assert asyncio.get_running_loop().time() < deadline, store.trouble
            await asyncio.sleep(0.02)
        await store.commit(insert_job(job(100)))
        back = {j.job_id: j for j in store.load_jobs(active_states=range(12), finished_after=0)}
        assert back[1].state == pb.JOB_STATE_CANCELLED
        assert [e.event for e in back[1].events] == ["submitted", "cancelled"]
        assert 100 in back and not set(refused) & set(back)
        assert store.outages == 1
    finally:
        store.close()


async def test_a_postgres_that_stops_refuses_then_recovers(tmp_path: pathlib.Path) -> None:
    """A private PostgreSQL stopped under load: acknowledged writes are all there, refused
    ones are not, and the store comes back by itself when the server does."""
    from corral.testing.postgres import TempPostgres

    pg = TempPostgres.start(tmp_path / "pg")
    if pg is None:
        pytest.skip("no PostgreSQL binaries on this machine")
    store = Store(pg.url, probe_interval_s=0.05)
    try:
        store.open()
        acked: set[int] = set()
        refused: set[int] = set()
        ids = iter(range(1, 1_000_000))
        done = asyncio.Event()

        async def submitter() -> None:
            while not done.is_set():
                i = next(ids)
                try:
                    await store.commit(insert_job(job(i)))
                    acked.add(i)
                except StoreError:
                    refused.add(i)
                    await asyncio.sleep(0.001)

        async def until(check: Any) -> None:
            deadline = asyncio.get_running_loop().time() + 30
            while not check():
                assert asyncio.get_running_loop().time() < deadline, store.trouble
                await asyncio.sleep(0.01)

        async def outage() -> None:
            await until(lambda: len(acked) >= 100)
            await asyncio.to_thread(pg.stop)
            await until(lambda: len(refused) >= 50)
            assert not store.available
            await asyncio.to_thread(pg.start_again)
            await until(lambda: store.available)
            before = len(acked)
            await until(lambda: len(acked) >= before + 50)
            done.set()

        await asyncio.wait_for(asyncio.gather(*[submitter() for _ in range(4)], outage()), 90)
        stored = {j.job_id for j in store.load_jobs(active_states=[1], finished_after=0)}
        assert acked <= stored  # nothing acknowledged was lost
        assert not refused & stored  # nothing refused was half-written
        assert store.outages == 1
    finally:
        store.close()
        pg.remove()


async def test_old_finished_jobs_are_archived_then_purged(
    store_url: str, tmp_path: pathlib.Path
) -> None:
    import json

    store = Store(store_url)
    store.open()
    day = 86400.0
    try:
        ops = []
        for job_id, state, end in (
            (1, pb.JOB_STATE_COMPLETED, 10 * day),  # old: goes
            (2, pb.JOB_STATE_FAILED, 11 * day),  # old: goes
            (3, pb.JOB_STATE_COMPLETED, 40 * day),  # recent: stays
            (4, pb.JOB_STATE_PENDING, 0.0),  # not finished: stays
        ):
            j = job(job_id, account="physics")
            j.state, j.end_time = state, end  # type: ignore[assignment]
            ops.append(insert_job(j))
        await store.commit(*ops)
        run = job(2)
        run.state, run.end_time = pb.JOB_STATE_REQUEUED, 5 * day  # type: ignore[assignment]
        last = job(2, end_time=11 * day)
        last.state = pb.JOB_STATE_FAILED
        await store.commit(update_job(last, [], [run]))
        finished = [pb.JOB_STATE_COMPLETED, pb.JOB_STATE_FAILED]
        archive = tmp_path / "archive"
        purged = store.purge_jobs(
            ended_before=30 * day, finished_states=finished, archive_dir=str(archive), chunk=1
        )
        assert purged == 2
        left = store.query_jobs(
            job_ids=[], users=[], states=[], start_after=0, end_before=0, limit=0
        )
        assert sorted(j.job_id for j in left) == [3, 4]
        assert store.earlier_runs([2]) == []
        (month,) = archive.iterdir()
        assert month.name == "jobs-1970-01.jsonl" and month.stat().st_mode & 0o777 == 0o600
        records = [json.loads(line) for line in month.read_text().splitlines()]
        assert [r["job"]["jobId"] for r in records] == ["1", "2"]
        assert records[0]["job"]["events"][0]["event"] == "submitted"
        assert [r["state"] for r in records[1]["earlierRuns"]] == ["JOB_STATE_REQUEUED"]
        assert store.purge_jobs(ended_before=30 * day, finished_states=finished) == 0
    finally:
        store.close()
