"""The durable store: jobs and their stories, through SQLAlchemy Core.

Write-ahead: ctld commits a change here before it acknowledges it or acts on it.
All writes go through one writer thread that takes every commit request queued
while the previous transaction was being made durable and commits them together
(group commit): one fsync for a whole burst of submits instead of one per job.
Requests commit in the order they were queued, so a job's RUNNING row can never
become durable before its submission.

Rows keep the columns sacct filters on; the full job is the ``data`` blob (the
serialized corral.v1.Job without its events, which live in ``job_events``).

One code for SQLite (embedded, WAL) and PostgreSQL (psycopg 3), chosen by the URL. The
schema is Alembic's (ctld.storage.migrate). When the database goes away (unreachable, disk full)
the store is *down*: every commit fails at once with StoreUnavailable, while the writer
probes the database; the updates of commits that failed that way are kept and written
first when it is back, so the store catches up with what ctld did in memory meanwhile.

With a standby controller, ``fence`` (ctld.storage.lease: the lease's fencing token) runs first
in every write transaction. Once it refuses, the store is *deposed*: that commit and
every later one fail with NotPrimary, nothing of them is written (not even the backlog),
and ctld steps down.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from corral.errors import NotPrimary, StoreError, StoreUnavailable
from ctld.storage import migrate, storelock
from ctld.storage.store_queries import StoreQueries, describe, is_trouble
from ctld.storage.store_rows import (
    NodeDrain,
    NodePower,
    Op,
    apply_ops,
    insert_job,
    jobs,
    metadata,
    update_job,
)

log = structlog.get_logger("ctld")

# what other modules take from here (the rows live in store_rows)
__all__ = ["NodeDrain", "NodePower", "Op", "Store", "insert_job", "jobs", "metadata", "update_job"]

MAX_BATCH = 2048  # commit requests per transaction
PROBE_INTERVAL_S = 0.5  # how often a down store retries its database


@dataclass
class _Request:
    ops: list[Op]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


def normalize_url(url: str) -> str:
    """postgres:// and postgresql:// mean psycopg 3 (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Store(StoreQueries):
    """The engine, the schema and the group-commit writer; the reads are StoreQueries'."""

    def __init__(
        self,
        url: str,
        *,
        sqlite_synchronous: str = "FULL",
        probe_interval_s: float = PROBE_INTERVAL_S,
        fence: Callable[[Connection], None] | None = None,
    ) -> None:
        try:
            parsed = sa.engine.make_url(normalize_url(url))
        except sa.exc.ArgumentError:
            raise StoreError(f"store_url {url!r}: not a database URL") from None
        self.url = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() not in ("sqlite", "postgresql"):
            raise StoreError(
                f"store_url {self.url}: only sqlite:///PATH and postgresql://... are supported"
            )
        self.engine: Engine = self.make_engine(normalize_url(url), sqlite_synchronous)
        self.backend = self.engine.dialect.name  # "sqlite" or "postgresql"
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self.commits = 0  # transactions made durable
        self.requests = 0  # commit requests served (>= commits under load)
        self.trouble = ""  # why the store is down; empty while it is up
        self.down_since = 0.0
        self.outages = 0
        self._probe_interval_s = probe_interval_s
        # what ctld changed in memory while the store was down, written first on return
        self._backlog: list[Op] = []
        self._backlog_lock = threading.Lock()
        self.fence = fence
        self.deposed = ""  # why another controller's lease fenced this one off; empty: not

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction, fenced first when a lease is held."""
        with self.engine.begin() as conn:
            if self.fence is not None:
                self.fence(conn)
            yield conn

    @staticmethod
    def make_engine(url: str, synchronous: str) -> Engine:
        if url.startswith("sqlite"):
            engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

            @sa.event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={synchronous}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

            return engine
        # a short connect timeout: a down store must answer "down" quickly, not hang
        engine = sa.create_engine(
            url, pool_pre_ping=True, pool_size=4, connect_args={"connect_timeout": 5}
        )
        storelock.name_sessions(engine)  # `corral db restore` sees that a ctld holds it
        return engine

    def open(self) -> None:
        try:
            migrate.check(self.engine, self.url)
            self._private_file()
        except sa.exc.SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreError(f"cannot open the store {self.url}: {exc}") from exc
        except StoreError:
            self.engine.dispose()
            raise
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
        self._writer.start()

    def _private_file(self) -> None:
        """The store holds every job's script and environment: owner-only (and its WAL)."""
        url = self.engine.url
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(url.database + suffix, 0o600)

    def close(self) -> None:
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=30)
            self._writer = None
        if self._backlog:
            log.error("store closed while down: changes not written", ops=len(self._backlog))
        self.engine.dispose()

    @property
    def available(self) -> bool:
        return not self.trouble

    async def wait_available(self) -> None:
        """Return once the store is up (at once if it is)."""
        while self.trouble:
            await asyncio.sleep(self._probe_interval_s)

    def check_writable(self) -> None:
        """Raise StoreUnavailable while the store is down (before changing anything)."""
        if self.deposed:
            raise NotPrimary(self.deposed)
        if self.trouble:
            raise StoreUnavailable(self._down_message())

    def _down_message(self) -> str:
        return (
            f"the store is unavailable ({self.trouble}): changes are refused until it is "
            "back; queries answer from ctld's memory"
        )

    # ------------------------------------------------------------ writes

    def commit(self, *ops: Op) -> asyncio.Future[None]:
        """Queue ops for the next group commit; the future resolves once they are durable.

        While the store is down it fails at once with StoreUnavailable."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self.deposed:
            fut.set_exception(NotPrimary(self.deposed))
            return fut
        if self.trouble and self._keep(ops):
            fut.set_exception(StoreUnavailable(self._down_message()))
            return fut
        self._queue.put(_Request(list(ops), loop, fut))
        return fut

    def _keep(self, ops: Iterable[Op]) -> bool:
        """Keep what a refused commit changed in ctld's memory, to write on return.

        New jobs are not kept: a submit whose commit failed was never acknowledged and
        never entered memory."""
        with self._backlog_lock:
            if not self.trouble:  # came back meanwhile: commit normally
                return False
            self._backlog.extend(op for op in ops if not op.inserts)
            return True

    def _write_loop(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._probe_interval_s if self.trouble else None)
            except queue.Empty:
                self._probe()
                continue
            if first is None:
                return
            if self.deposed:  # nothing more is written by a controller fenced off
                self._refuse_deposed([first])
                continue
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            if self.trouble:
                self._probe()
            if self.deposed:
                self._refuse_deposed(batch)
            elif self.trouble:
                self._refuse(batch)
            else:
                self._commit_batch(batch)
            if stop:
                return

    def _go_down(self, exc: BaseException) -> None:
        first = not self.trouble
        self.trouble = describe(exc)
        if first:
            self.down_since = time.time()
            self.outages += 1
            log.error("store down: refusing changes", store=self.url, error=self.trouble)
            self.engine.dispose()  # its pooled connections are dead or stuck

    def _refuse(self, batch: list[_Request]) -> None:
        error = StoreUnavailable(self._down_message())
        with self._backlog_lock:
            for req in batch:
                self._backlog.extend(op for op in req.ops if not op.inserts)
        for req in batch:
            self._finish(req, error)
        self.requests += len(batch)

    def _depose(self, exc: NotPrimary) -> None:
        if not self.deposed:
            log.error("deposed: another controller holds the lease", error=str(exc))
        self.deposed = str(exc)
        with self._backlog_lock:  # the new primary's state is the truth now
            self._backlog.clear()
        self.trouble = ""

    def _refuse_deposed(self, batch: list[_Request]) -> None:
        error = NotPrimary(self.deposed)
        for req in batch:
            self._finish(req, error)
        self.requests += len(batch)

    def _probe(self) -> None:
        """Down: try the database; once it answers, write the backlog and come back up."""
        replayed = 0
        while True:
            with self._backlog_lock:
                backlog = list(self._backlog)
            try:
                with self._writing() as conn:
                    conn.execute(sa.text("SELECT 1"))
                    apply_ops(conn, backlog)
            except NotPrimary as exc:
                self._depose(exc)
                return
            except Exception as exc:
                if is_trouble(exc):
                    self.trouble = describe(exc)
                    return
                # not the database's absence: the backlog itself cannot be written; ctld's
                # memory still has those changes and writes each job whole on its next change
                log.error("store backlog dropped", error=str(exc), ops=len(backlog))
            replayed += len(backlog)
            with self._backlog_lock:
                del self._backlog[: len(backlog)]
                if not self._backlog:  # else refused while we wrote: once more
                    self.trouble = ""
                    break
        log.warning(
            "store back: accepting changes",
            store=self.url,
            down_s=round(time.time() - self.down_since, 1),
            replayed=replayed,
        )

    def _commit_batch(self, batch: list[_Request]) -> None:
        try:
            with self._writing() as conn:
                apply_ops(conn, (op for req in batch for op in req.ops))
        except NotPrimary as exc:  # fenced off: none of it is written, ever
            self._depose(exc)
            self._refuse_deposed(batch)
            return
        except Exception as exc:  # isolate the request that failed; the rest still commit
            if is_trouble(exc):
                self._go_down(exc)
                self._refuse(batch)
                return
            if len(batch) == 1:
                self._finish(batch[0], StoreError(f"store commit failed: {exc}"))
                self.requests += 1
                return
            for i, req in enumerate(batch):
                try:
                    with self._writing() as conn:
                        apply_ops(conn, req.ops)
                except NotPrimary as exc:
                    self._depose(exc)
                    self._refuse_deposed(batch[i:])
                    return
                except Exception as exc:
                    if is_trouble(exc):
                        self._go_down(exc)
                        self._refuse(batch[i:])
                        return
                    self._finish(req, StoreError(f"store commit failed: {exc}"))
                else:
                    self.commits += 1
                    self._finish(req, None)
                self.requests += 1
            return
        self.commits += 1
        self.requests += len(batch)
        self._finish_all(batch)

    @staticmethod
    def _finish_all(batch: list[_Request]) -> None:
        """Resolve a whole committed batch with one wake-up per event loop, not one per request."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Request]] = {}
        for req in batch:
            by_loop.setdefault(req.loop, []).append(req)
        for loop, reqs in by_loop.items():

            def resolve(reqs: list[_Request] = reqs) -> None:
                for req in reqs:
                    if not req.future.done():
                        req.future.set_result(None)

            with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
                loop.call_soon_threadsafe(resolve)

    @staticmethod
    def _finish(req: _Request, error: BaseException | None) -> None:
        def resolve() -> None:
            if req.future.done():
                return
            if error is None:
                req.future.set_result(None)
            else:
                req.future.set_exception(error)

        with contextlib.suppress(RuntimeError):  # the loop is closed: ctld is shutting down
            req.loop.call_soon_threadsafe(resolve)
