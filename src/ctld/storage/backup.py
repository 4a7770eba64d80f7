"""``corral db backup``: a consistent copy of the store, taken while ctld runs.

SQLite: the online backup API (``sqlite3.Connection.backup``) in one step, which copies
a snapshot of one read transaction while ctld goes on writing (WAL: readers do not block
the writer), into a private temporary file; checked there (``PRAGMA integrity_check``,
its revision read from the copy itself), then written out as the payload.

PostgreSQL: ``pg_dump`` (PostgreSQL's client tools) of the store's tables in the schema
the URL uses, without the failover lease (coordination, not data: restoring an old
token could hand a fencing token out twice). The revision is read in a REPEATABLE READ
transaction whose snapshot pg_dump is given (``--snapshot``): the revision in the
header is the one of the rows in the dump, even while ``corral db upgrade`` or ctld
commit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from typing import IO

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from corral import __version__
from corral.errors import StoreError
from ctld.storage import backup_file, migrate, storelock
from ctld.storage.backup_file import Header
from ctld.storage.lease import TABLE as LEASE_TABLE

DAMAGED = "see docs/operations.md#a-damaged-store"


def shown(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def take(engine: Engine, dest: str) -> Header:
    """Back the store of ``engine`` up to the file ``dest``; the header written."""
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, dest)
    return _postgres(engine, dest)


def sqlite_revision(path: str) -> str:
    """The schema revision of the SQLite database file ``path``."""
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            rev = migrate.current(conn)
    finally:
        engine.dispose()
    if rev is None:
        raise StoreError("the store is empty: there is nothing to back up")
    return rev


def integrity(conn: sqlite3.Connection) -> str:
    """SQLite's own check of every page and index: "" when sound, else what is wrong."""
    rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
    return "" if rows == ["ok"] else "; ".join(rows[:5])


def _sqlite(engine: Engine, dest: str) -> Header:
    database = storelock.sqlite_file(engine.url)
    if database is None:
        raise StoreError(f"{shown(engine)}: an in-memory store has nothing to back up")
    if not os.path.isfile(database):
        raise StoreError(f"{database}: no such store")
    directory = os.path.dirname(os.path.abspath(dest))
    try:
        # a private directory: SQLite makes files beside the copy (its journal), which a
        # link planted in a shared directory could otherwise redirect
        work = tempfile.mkdtemp(prefix=".corral-backup.", dir=directory)
    except OSError as exc:
        raise StoreError(f"{dest}: cannot write there: {exc.strerror}") from None
    snap = os.path.join(work, "snapshot.db")
    try:
        # read-only: a backup never writes the store, nor creates one at a wrong path
        source = sqlite3.connect(
            f"file:{urllib.parse.quote(database)}?mode=ro", uri=True, timeout=30
        )
        copy = sqlite3.connect(snap)
        try:
            source.backup(copy)  # all pages in one step: one consistent snapshot
            damage = integrity(copy)
            if damage:
                raise StoreError(f"{database}: the store is damaged ({damage}); {DAMAGED}")
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        except sqlite3.OperationalError as exc:  # locked, out of space, I/O
            raise StoreError(f"{database}: the backup failed: {exc}") from None
        except sqlite3.DatabaseError as exc:  # SQLITE_CORRUPT, SQLITE_NOTADB
            raise StoreError(f"{database}: the store is damaged ({exc}); {DAMAGED}") from None
        finally:
            copy.close()
            source.close()
        header = Header("sqlite", sqlite_revision(snap), __version__, time.time(), shown(engine))
        with open(snap, "rb") as f:
            return backup_file.write(dest, header, lambda out: backup_file.copy_payload(f, out))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def quoted(name: str) -> str:
    """A name as pg_dump's patterns take it literally."""
    return '"' + name.replace('"', '""') + '"'


def libpq(engine: Engine) -> tuple[str, dict[str, str]]:
    """The store's URL as the client tools take it, and their environment: the
    password travels in PGPASSWORD, never in an argument other users can read."""
    url = engine.url
    env = dict(os.environ)
    if url.password is not None:
        env["PGPASSWORD"] = str(url.password)
    plain = url.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def client_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StoreError(
            f"{name} not found: install PostgreSQL's client tools (Debian: postgresql-client) "
            "of the server's major version or newer"
        )
    return found


def _postgres(engine: Engine, dest: str) -> Header:
    pg_dump = client_tool("pg_dump")
    conn = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with conn, conn.begin():
        snapshot = str(conn.execute(sa.text("SELECT pg_export_snapshot()")).scalar())
        schema = str(conn.execute(sa.text("SELECT current_schema()")).scalar() or "")
        if not schema:
            raise StoreError(f"{shown(engine)}: no schema (search_path names none that exists)")
        revision = migrate.current(conn)
        if revision is None:
            raise StoreError(f"{shown(engine)}: the store is empty: there is nothing to back up")
        url, env = libpq(engine)
        argv = [
            pg_dump,
            "--format=plain",
            "--no-owner",
            "--no-privileges",
            f"--snapshot={snapshot}",
            f"--table={quoted(schema)}.*",
            f"--exclude-table={quoted(schema)}.{quoted(LEASE_TABLE)}",
            f"--dbname={url}",
        ]
        header = Header("postgresql", revision, __version__, time.time(), shown(engine), schema)

        def dump(out: backup_file.Sink) -> None:
            run_client(argv, env, output=out)

        # the snapshot lives as long as this transaction: pg_dump runs inside it
        return backup_file.write(dest, header, dump)


def run_client(
    argv: list[str],
    env: dict[str, str],
    *,
    output: backup_file.Sink | None = None,
    feed: Callable[[IO[bytes]], None] | None = None,
) -> None:
    """Run a PostgreSQL client tool: ``feed`` writes its input, its output goes to
    ``output``; StoreError with the end of what it said if it fails."""
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if feed is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if output is not None else said,
            stderr=said,
            env=env,
        )
        try:
            if feed is not None:
                assert proc.stdin is not None
                try:
                    feed(proc.stdin)
                except BrokenPipeError:
                    pass  # it stopped reading (an error): its exit status says why
                finally:
                    with contextlib.suppress(BrokenPipeError):
                        proc.stdin.close()
            if output is not None:
                assert proc.stdout is not None
                backup_file.copy_payload(proc.stdout, output)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        rc = proc.wait()
        if rc != 0:
            said.seek(0)
            lines = said.read().decode(errors="replace").strip().splitlines()
            raise StoreError(
                f"{os.path.basename(argv[0])} failed (exit {rc}): {' | '.join(lines[-5:])}"
            )


def check(engine: Engine) -> str:
    """Read the whole store (SQLite: ``PRAGMA integrity_check``, every page and index;
    PostgreSQL: every row of every table): "" when sound, else what is wrong."""
    database = storelock.sqlite_file(engine.url)
    if database is not None:
        if not os.path.isfile(database):
            raise StoreError(f"{database}: no such store")
        try:
            db = sqlite3.connect(
                f"file:{urllib.parse.quote(database)}?mode=ro", uri=True, timeout=30
            )
            try:
                return integrity(db)
            finally:
                db.close()
        except sqlite3.Error as exc:  # not even a database: SQLITE_NOTADB, SQLITE_CORRUPT
            return str(exc)
    with engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            conn.execute(sa.text(f"SELECT count(*) FROM {quoted(table)}")).scalar()
    return ""
