"""``corral db backup``, ``restore``, ``verify`` and ``check`` on SQLite and PostgreSQL,
through the real command: a backup restores exactly what it holds and keeps the store it
replaced; a rollback restores the schema from before ``corral db upgrade``; a backup of
a newer schema, a damaged file, one of the other backend, and a store a ctld holds are
refused with the store untouched. (With a real ctld under load, and noded fencing what
the restored store does not know: tests/integration/test_backup_restore.py.)"""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic import command

from corral.wire import corral_pb2 as pb
from ctld.storage import migrate
from ctld.storage.backup_file import HEADER_BYTES
from ctld.storage.lease import Lease
from ctld.storage.store import Store, insert_job, normalize_url
from ctld.storage.storelock import FileHold

pytestmark = pytest.mark.timeout(120)
CORRAL = pathlib.Path(sys.executable).parent / "corral"


def db(*argv: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CORRAL), "db", *argv], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def ok(*argv: str) -> str:
    done = db(*argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def job(job_id: int) -> pb.Job:
    j = pb.Job(job_id=job_id, user="u", state=pb.JOB_STATE_PENDING, submit_time=float(job_id))
    j.events.add(event="submitted", to_state=pb.JOB_STATE_PENDING, cause="test")
    return j


def add_jobs(url: str, *ids: int) -> None:
    async def fill() -> None:
        store = Store(url)
        store.open()
        try:
            for i in ids:
                await store.commit(insert_job(job(i)))
        finally:
            store.close()

    asyncio.run(fill())


def job_ids(url: str, schema: str = "") -> list[int]:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            table = f'"{schema}".jobs' if schema else "jobs"
            rows = conn.execute(sa.text(f"SELECT job_id FROM {table} ORDER BY job_id"))
            return [int(r[0]) for r in rows]
    finally:
        engine.dispose()


def revision(url: str) -> str | None:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return migrate.current(conn)
    finally:
        engine.dispose()


def execute(url: str, sql: str) -> None:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


@pytest.fixture
def store(store_url: str) -> Iterator[str]:
    """The store_url fixture, and the schemas a PostgreSQL restore set aside dropped."""
    yield store_url
    if store_url.startswith("postgres"):
        engine = sa.create_engine(normalize_url(store_url))
        with engine.begin() as conn:
            schema = conn.execute(sa.text("SELECT current_schema()")).scalar()
            for (name,) in conn.execute(
                sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :p"),
                {"p": f"{schema}_replaced_%"},
            ):
                conn.execute(sa.text(f'DROP SCHEMA "{name}" CASCADE'))
        engine.dispose()


def test_a_restore_puts_back_exactly_the_backup_and_keeps_what_it_replaced(
    store: str, tmp_path: pathlib.Path
) -> None:
    add_jobs(store, 1, 2, 3)
    path = tmp_path / "corral.backup"
    out = ok("backup", "--url", store, str(path))
    assert f"revision {migrate.head()}" in out
    assert path.stat().st_mode & 0o777 == 0o600
    assert "checksum ok" in ok("verify", str(path))
    add_jobs(store, 4)
    out = ok("restore", "--url", store, str(path))
    assert "restored from" in out and "needs revision" not in out
    assert job_ids(store) == [1, 2, 3]
    kept = out.split("the store it replaced is kept as ")[1].strip()
    if store.startswith("sqlite"):
        assert oct(os.stat(kept).st_mode & 0o777) == oct(0o600)
        assert job_ids(f"sqlite:///{kept}") == [1, 2, 3, 4]
        assert not [p for p in tmp_path.iterdir() if ".restore." in p.name]
    else:
        assert job_ids(store, schema=kept) == [1, 2, 3, 4]
    assert ok("check", "--url", store).strip().endswith(": ok")
    add_jobs(store, 5)  # the restored store takes new jobs (ctld's own open)
    assert job_ids(store) == [1, 2, 3, 5]


def test_a_rollback_restores_the_schema_from_before_the_upgrade(
    store: str, tmp_path: pathlib.Path
) -> None:
    engine = sa.create_engine(normalize_url(store))
    with engine.begin() as conn:  # a store as the previous corral left it: revision 0006
        command.upgrade(migrate._config(conn), "0006")
        row = insert_job(job(7))
        conn.execute(
            sa.table("jobs", *(sa.column(k) for k in row.inserts[0])).insert(), row.inserts
        )
    engine.dispose()
    before = tmp_path / "before-upgrade.backup"
    assert "revision 0006" in ok("backup", "--url", store, str(before))
    assert "from 0006 to" in ok("upgrade", "--url", store)
    add_jobs(store, 8)  # run on the new version a while
    out = ok("restore", "--url", store, str(before))
    assert f"this corral needs revision {migrate.head()}" in out
    assert revision(store) == "0006"
    assert job_ids(store) == [7]
    # nothing of the newer schema is left behind: the upgrade runs again from 0006
    assert "from 0006 to" in ok("upgrade", "--url", store)
    assert job_ids(store) == [7]


def test_a_backup_of_a_newer_schema_is_refused_and_the_store_kept(
    store: str, tmp_path: pathlib.Path
) -> None:
    add_jobs(store, 1)
    execute(store, "UPDATE alembic_version SET version_num = 'f00d'")
    newer = tmp_path / "newer.backup"
    assert "revision f00d" in ok("backup", "--url", store, str(newer))  # data is data
    verify = db("verify", str(newer))
    assert verify.returncode == 1 and "newer than this corral knows" in verify.stdout
    execute(store, f"UPDATE alembic_version SET version_num = '{migrate.head()}'")
    add_jobs(store, 2)
    done = db("restore", "--url", store, str(newer))
    assert done.returncode == 1
    assert "revision f00d, which this corral does not know" in done.stderr, done.stderr
    assert f"it knows up to {migrate.head()}" in done.stderr
    assert job_ids(store) == [1, 2] and revision(store) == migrate.head()


def test_damaged_or_foreign_backups_are_refused(tmp_path: pathlib.Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    add_jobs(url, 1)
    good = tmp_path / "good.backup"
    ok("backup", "--url", url, str(good))
    data = good.read_bytes()

    def refused(name: str, content: bytes, why: str) -> None:
        path = tmp_path / name
        path.write_bytes(content)
        path.chmod(0o600)
        done = db("restore", "--url", url, str(path))
        assert done.returncode == 1 and why in done.stderr, done.stderr
        assert job_ids(url) == [1]

    flipped = bytearray(data)
    flipped[HEADER_BYTES + 5000] ^= 0xFF
    refused("flipped.backup", bytes(flipped), "does not match its checksum")
    refused("short.backup", data[:-100], "truncated or damaged")
    refused("other.backup", b"SQLite format 3\0" + data[16:], "not a corral backup")
    head = data[:HEADER_BYTES].replace(b'"backend": "sqlite"', b'"backend": "postgresql"')
    pg = head[:HEADER_BYTES] + data[HEADER_BYTES:]  # (the padding takes the longer name)
    refused("pg.backup", pg, "a postgresql backup cannot be restored into a sqlite store")
    missing = db("restore", "--url", url, str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "No such file" in missing.stderr


def test_a_store_a_ctld_holds_is_neither_restored_nor_upgraded(
    store: str, tmp_path: pathlib.Path
) -> None:
    add_jobs(store, 1)
    path = tmp_path / "b.backup"
    ok("backup", "--url", store, str(path))
    add_jobs(store, 2)
    if store.startswith("sqlite"):
        held = FileHold(store.removeprefix("sqlite:///"), "ctld")
        why = f"held by ctld (pid {os.getpid()}"
    else:
        opened = Store(store)  # ctld's engine names its sessions
        opened.open()
        why = "a ctld session (server pid"
    try:
        for action in (["restore", "--url", store, str(path)], ["upgrade", "--url", store]):
            done = db(*action)
            assert done.returncode == 1 and why in done.stderr, done.stderr
            assert "stop" in done.stderr
    finally:
        if store.startswith("sqlite"):
            held.release()
        else:
            opened.close()
    assert job_ids(store) == [1, 2]
    if store.startswith("postgres"):  # a primary gone, its failover lease not yet expired
        engine = sa.create_engine(normalize_url(store))
        lease = Lease(engine, "ctl01", 60.0)
        lease.ensure()
        assert lease.try_acquire()
        engine.dispose()
        done = db("restore", "--url", store, str(path))
        assert done.returncode == 1
        assert "the failover lease, held by ctl01" in done.stderr, done.stderr
        execute(store, "UPDATE corral_controller_lease SET expires_at = 'epoch'")
    ok("restore", "--url", store, str(path))
    assert job_ids(store) == [1]


def test_db_check_finds_a_damaged_sqlite_store(tmp_path: pathlib.Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    add_jobs(url, *range(1, 200))
    assert ok("check", "--url", url).strip().endswith(": ok")
    with open(tmp_path / "s.db", "r+b") as f:  # garbage over a page in the middle
        f.seek(4096 * 8)
        f.write(os.urandom(4096))
    done = db("check", "--url", url)
    assert done.returncode == 1 and "DAMAGED" in done.stdout, done.stdout
    backup = db("backup", "--url", url, str(tmp_path / "b.backup"))
    assert backup.returncode == 1 and "the store is damaged" in backup.stderr
    assert not (tmp_path / "b.backup").exists()
