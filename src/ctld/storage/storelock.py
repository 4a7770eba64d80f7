"""Who holds the store: a running ctld, so that ``corral db restore`` and ``corral db
upgrade`` refuse to change a store under it (and a second ctld refuses a SQLite file).

SQLite: ctld holds an exclusive ``flock`` on ``<database>.lock`` (beside the file,
owner-only, the holder's pid and name in it) for as long as it runs; the kernel drops it
when the process ends, however it ends. flock, not fcntl: SQLite's own POSIX locks on the
database are independent of it, and no other descriptor's close can drop it.

PostgreSQL: ctld may run on another host, so the database says. ctld names each of its
sessions ``corral-ctld:<schema>`` (``application_name``, set as a connection opens):
``pg_stat_activity`` lists the sessions of every ctld, primary or standby, on that
schema. A primary whose sessions are all gone (its host died) may still hold the
failover lease (ctld.storage.lease) until it expires: that counts too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError
from ctld.storage.lease import KEY as LEASE_KEY
from ctld.storage.lease import TABLE as LEASE_TABLE

APP_PREFIX = "corral-ctld:"
# application_name is cut at 63 bytes (NAMEDATALEN - 1): both sides cut it the same way
_NAME = f"left('{APP_PREFIX}' || coalesce(current_schema(), ''), 63)"
_SESSIONS = (
    "SELECT pid, coalesce(host(client_addr), 'local socket') AS client, "
    "EXTRACT(EPOCH FROM clock_timestamp() - backend_start) AS age_s FROM pg_stat_activity "
    f"WHERE datname = current_database() AND application_name = {_NAME} "
    "AND pid <> pg_backend_pid() ORDER BY pid"
)
_LEASE = (
    f"SELECT holder, EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS left_s "
    f"FROM {LEASE_TABLE} WHERE name = :key"
)
STOPPED_GRACE_S = 3.0  # a ctld just stopped: its sessions end a moment after it


def name_sessions(engine: Engine) -> None:
    """Every connection ``engine`` opens says it is ctld's, for this schema."""

    @sa.event.listens_for(engine, "connect")
    def _named(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SELECT set_config('application_name', {_NAME}, false)")
        cur.close()
        dbapi_conn.commit()  # a session setting made in a rolled-back transaction is undone


def lock_path(database: str) -> str:
    return database + ".lock"


def sqlite_file(url: sa.URL) -> str | None:
    """The SQLite database file of ``url``; None for PostgreSQL or an in-memory one."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return os.path.abspath(url.database)


class FileHold:
    """The exclusive flock on a SQLite store's lock file, held until ``release``."""

    def __init__(self, database: str, holder: str) -> None:
        self.path = lock_path(database)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(
                f"{self.path}: cannot open the store's lock file: {exc.strerror}"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StoreError(f"{self.path}: the store's lock file is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreError(f"{database}: held by {_read_holder(fd)}: stop it first") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {holder}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            # emptied first: a stale pid in it would name a process that holds nothing
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FileHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    pid, _, name = text.partition(" ")
    if not pid.isdigit():
        return "another process"
    return f"{name or 'a process'} (pid {pid}{_host_note()})"


def _host_note() -> str:
    return f" on {os.uname().nodename}"


def pg_holders(conn: Connection) -> list[str]:
    """What holds this PostgreSQL store now: ctld sessions, a live failover lease."""
    found = [
        f"a ctld session (server pid {row.pid}, from {row.client}, {row.age_s:.0f} s old)"
        for row in conn.execute(sa.text(_SESSIONS))
    ]
    if sa.inspect(conn).has_table(LEASE_TABLE):
        row = conn.execute(sa.text(_LEASE), {"key": LEASE_KEY}).one_or_none()
        if row is not None and row.holder and float(row.left_s) > 0:
            found.append(f"the failover lease, held by {row.holder} for {row.left_s:.0f} s more")
    return found


def hold(engine: Engine, holder: str, shown: str) -> FileHold | None:
    """Refuse (StoreError) while a ctld holds the store of ``engine``; on SQLite, hold
    its lock for the caller (release it when done) so that no ctld starts meanwhile."""
    database = sqlite_file(engine.url)
    if database is not None:
        return FileHold(database, holder)
    deadline = time.monotonic() + STOPPED_GRACE_S
    while True:
        with engine.connect() as conn:
            found = pg_holders(conn)
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if found:
        raise StoreError(
            f"{shown}: a ctld holds this store ({'; '.join(found)}): stop every ctld first"
        )
    return None
