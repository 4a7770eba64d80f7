"""``corral db restore``: put a backup (ctld.storage.backup) back as the store, ctld stopped.

Everything is checked before the store is touched: the file (the caller's or root's,
written by no one else, its size and checksum: ctld.storage.backup_file), the backend, and the
revision (one this corral knows: a backup of a newer schema is refused; an older one is
restored as it is, for the corral that wrote it or for ``corral db upgrade``). Then no
ctld may hold the store (ctld.storage.storelock); on SQLite the restore holds the store's lock
itself until it is done, so no ctld starts on a half-restored file.

Nothing is lost by a restore: the store it replaces is kept beside it. SQLite: the
database file (with its ``-wal`` and ``-shm``) is renamed ``<file>.replaced-<time>``,
and the backup, written to a private temporary file and checked there, is renamed into
its place. PostgreSQL: in one transaction (psql ``--single-transaction``), the store's
tables move to a schema ``<schema>_replaced_<time>`` and pg_dump's SQL recreates them:
a restore that fails leaves the store as it was. The failover lease stays where it is,
so fencing tokens keep rising across a restore.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from typing import IO

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from corral.errors import StoreError
from ctld.storage import backup_file, migrate, storelock
from ctld.storage.backup import (
    client_tool,
    integrity,
    libpq,
    quoted,
    run_client,
    shown,
    sqlite_revision,
)
from ctld.storage.backup_file import Header
from ctld.storage.lease import TABLE as LEASE_TABLE


@dataclass(frozen=True)
class Restored:
    header: Header
    replaced: str  # where the store it replaced is kept; "" when there was none


def check_header(header: Header, engine: Engine, path: str) -> None:
    """Refuse a backup this store or this corral cannot take, before anything changes."""
    if header.backend != engine.dialect.name:
        raise StoreError(
            f"{path}: a {header.backend} backup cannot be restored into a "
            f"{engine.dialect.name} store ({shown(engine)})"
        )
    if not migrate.known(header.revision):
        raise StoreError(
            f"{path}: the backup's schema is at revision {header.revision}, which this corral "
            f"does not know (it knows up to {migrate.head()}): it was written by corral "
            f"{header.corral_version}; restore it with that version or a newer one"
        )


def restore(engine: Engine, path: str) -> Restored:
    with backup_file.open_trusted(path) as (header, payload):
        check_header(header, engine, path)
        if header.backend == "sqlite":
            return _sqlite(engine, header, payload)
        return _postgres(engine, header, payload)


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S")


def _sqlite(engine: Engine, header: Header, payload: IO[bytes]) -> Restored:
    database = storelock.sqlite_file(engine.url)
    if database is None:
        raise StoreError(f"{shown(engine)}: cannot restore into an in-memory store")
    if os.path.islink(database):
        raise StoreError(f"{database}: is a symbolic link: point store_url at the file itself")
    directory = os.path.dirname(database)
    if not os.path.isdir(directory):
        raise StoreError(f"{directory}: no such directory")
    with storelock.FileHold(database, "corral db restore"):
        # checked in a private directory (SQLite may make files beside it), then renamed
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(database)}.restore.", dir=directory)
        try:
            tmp = os.path.join(work, "store.db")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                backup_file.copy_payload(payload, out)
                out.flush()
                os.fsync(out.fileno())
                with contextlib.suppress(FileNotFoundError):
                    old = os.stat(database)  # the store's owner (ctld's user) keeps it
                    os.fchown(out.fileno(), old.st_uid, old.st_gid)
            _check_sqlite_copy(tmp, header)
            replaced = ""
            if os.path.exists(database):
                replaced = f"{database}.replaced-{_stamp()}"
                # with its WAL, which may hold commits not yet in the file
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(database + suffix, replaced + suffix)
            os.rename(tmp, database)
            backup_file.sync_dir(directory)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return Restored(header, replaced)


def _check_sqlite_copy(path: str, header: Header) -> None:
    try:
        conn = sqlite3.connect(path)
        try:
            damage = integrity(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"the backup's database cannot be read: {exc}") from None
    if damage:
        raise StoreError(f"the backup's database is damaged: {damage}")
    found = sqlite_revision(path)
    if found != header.revision:
        raise StoreError(
            f"the backup's database is at revision {found}, its header says {header.revision}"
        )


def _postgres(engine: Engine, header: Header, payload: IO[bytes]) -> Restored:
    psql = client_tool("psql")
    storelock.hold(engine, "corral db restore", shown(engine))
    with engine.connect() as conn:
        schema = str(conn.execute(sa.text("SELECT current_schema()")).scalar() or "")
        tables = [t for t in sa.inspect(conn).get_table_names() if t != LEASE_TABLE]
    if schema != header.schema:
        raise StoreError(
            f"the backup holds the tables of schema {header.schema!r}, but {shown(engine)} "
            f"uses schema {schema or 'none'!r}: restore into a store whose search_path is "
            f"{header.schema!r}"
        )
    prefix = ""
    replaced = ""
    if tables:
        suffix = f"_replaced_{_stamp().lower()}"
        replaced = schema[: 63 - len(suffix)] + suffix
        moves = "".join(
            f"ALTER TABLE {quoted(schema)}.{quoted(t)} SET SCHEMA {quoted(replaced)};\n"
            for t in tables
        )
        prefix = f"CREATE SCHEMA {quoted(replaced)};\n{moves}"
    url, env = libpq(engine)
    argv = [
        psql,
        "--no-psqlrc",
        "--quiet",
        "--single-transaction",
        "--set=ON_ERROR_STOP=1",
        "--file=-",
        f"--dbname={url}",
    ]

    def feed(stdin: IO[bytes]) -> None:
        stdin.write(prefix.encode())
        backup_file.copy_payload(payload, stdin)

    run_client(argv, env, feed=feed)
    with engine.connect() as conn:
        found = migrate.current(conn)
    if found != header.revision:
        raise StoreError(f"restored, but the store reads revision {found}, not {header.revision}")
    return Restored(header, replaced)
