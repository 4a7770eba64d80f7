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
schema is Alembic's (ctld.migrate). When the database goes away (unreachable, disk full)
the store is *down*: every commit fails at once with StoreUnavailable, while the writer
probes the database; the updates of commits that failed that way are kept and written
first when it is back, so the store catches up with what ctld did in memory meanwhile.

With a standby controller, ``fence`` (ctld.lease: the lease's fencing token) runs first
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from corral.errors import NotPrimary, StoreError, StoreUnavailable
from corral.wire import corral_pb2 as pb
from ctld import migrate
from ctld.archive import archive_jobs
from ctld.jsonmap import message_to_json
from ctld.store_rows import (
    NodeDrain,
    Op,
    accounting,
    apply_ops,
    insert_job,
    job_events,
    job_runs,
    jobs,
    metadata,
    node_downs,
    node_drains,
    reservations,
    update_job,
)

log = structlog.get_logger("ctld")

# what other modules take from here (the rows live in store_rows)
__all__ = ["NodeDrain", "Op", "Store", "insert_job", "jobs", "metadata", "update_job"]

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


def _is_trouble(exc: BaseException) -> bool:
    """The database is away or full (it may come back), not a bad request."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError)


def _describe(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


@contextlib.contextmanager
def _read_errors(engine: Engine) -> Iterator[Connection]:
    """A read connection whose database errors leave as StoreError, with the cause."""
    try:
        with engine.connect() as conn:
            yield conn
    except sa.exc.SQLAlchemyError as exc:
        if _is_trouble(exc):
            raise StoreUnavailable(f"the store cannot answer: {_describe(exc)}") from exc
        raise StoreError(f"store query failed: {_describe(exc)}") from exc


class Store:
    """The engine, the schema and the group-commit writer."""

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
        return sa.create_engine(
            url, pool_pre_ping=True, pool_size=4, connect_args={"connect_timeout": 5}
        )

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
        self.trouble = _describe(exc)
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
                if _is_trouble(exc):
                    self.trouble = _describe(exc)
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
            if _is_trouble(exc):
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
                    if _is_trouble(exc):
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

    # ------------------------------------------------------------ reads (any thread)

    def _reading(self) -> contextlib.AbstractContextManager[Connection]:
        return _read_errors(self.engine)

    def next_job_id(self) -> int:
        with self._reading() as conn:
            value = conn.execute(sa.select(sa.func.max(jobs.c.job_id))).scalar()
        return int(value or 0) + 1

    def load_jobs(self, *, active_states: Iterable[int], finished_after: float) -> list[pb.Job]:
        """Active jobs, and finished ones that ended after ``finished_after``, with stories."""
        cond = sa.or_(jobs.c.state.in_(list(active_states)), jobs.c.end_time > finished_after)
        with self._reading() as conn:
            return self._jobs_with_events(conn, sa.select(jobs.c.data).where(cond))

    def load_reservations(self) -> list[pb.Reservation]:
        with self._reading() as conn:
            rows = conn.execute(sa.select(reservations.c.data).order_by(reservations.c.name))
            return [pb.Reservation.FromString(data) for (data,) in rows]

    def load_drains(self) -> list[NodeDrain]:
        with self._reading() as conn:
            rows = conn.execute(sa.select(node_drains).order_by(node_drains.c.name))
            return [NodeDrain(r.name, r.reason, r.reason_time, r.reason_uid) for r in rows]

    def load_downs(self) -> list[NodeDrain]:
        """Nodes an operator took DOWN (same fields as a drain)."""
        with self._reading() as conn:
            rows = conn.execute(sa.select(node_downs).order_by(node_downs.c.name))
            return [NodeDrain(r.name, r.reason, r.reason_time, r.reason_uid) for r in rows]

    def load_accounting(self) -> list[tuple[str, str, str]]:
        """sacctmgr's records: (kind, name, JSON), in kind and name order."""
        with self._reading() as conn:
            rows = conn.execute(
                sa.select(accounting.c.kind, accounting.c.name, accounting.c.data).order_by(
                    accounting.c.kind, accounting.c.name
                )
            )
            return [(r.kind, r.name, r.data) for r in rows]

    def finished_since(self, horizon: float) -> list[pb.Job]:
        """Jobs that ran and ended after ``horizon`` (what fair-share usage is made of)."""
        stmt = sa.select(jobs.c.data).where(jobs.c.end_time > horizon, jobs.c.start_time > 0)
        with self._reading() as conn:
            return self._jobs_with_events(conn, stmt, with_events=False)

    def earlier_runs_since(self, horizon: float) -> list[pb.Job]:
        """Earlier runs of requeued jobs that ended after ``horizon`` (fair-share usage)."""
        stmt = sa.select(job_runs.c.data).where(
            job_runs.c.end_time > horizon, job_runs.c.start_time > 0
        )
        with self._reading() as conn:
            return [pb.Job.FromString(data) for (data,) in conn.execute(stmt)]

    def runs_between(self, start: float, end: float) -> list[pb.Job]:
        """Every run that overlapped [start, end): current runs (jobs rows that started;
        end_time 0 while running) and the earlier runs of requeued jobs (job_runs), each
        as the job stood then. What sreport adds up."""
        out: list[pb.Job] = []
        with self._reading() as conn:
            for table in (jobs, job_runs):
                stmt = sa.select(table.c.data).where(
                    table.c.start_time > 0,
                    table.c.start_time < end,
                    sa.or_(table.c.end_time == 0, table.c.end_time > start),
                )
                out.extend(pb.Job.FromString(data) for (data,) in conn.execute(stmt))
        return out

    def query_jobs(
        self,
        *,
        job_ids: list[int],
        users: list[str],
        states: list[int],
        names: Sequence[str] = (),
        partitions: Sequence[str] = (),
        accounts: Sequence[str] = (),
        start_after: float,
        end_before: float,
        limit: int,
        after_job_id: int = 0,
    ) -> list[pb.Job]:
        stmt = sa.select(jobs.c.data).order_by(jobs.c.job_id)
        if after_job_id:
            stmt = stmt.where(jobs.c.job_id > after_job_id)
        if job_ids:
            stmt = stmt.where(jobs.c.job_id.in_(job_ids))
        if users:
            stmt = stmt.where(jobs.c.user.in_(users))
        if states:
            stmt = stmt.where(jobs.c.state.in_(states))
        for column, values in (
            (jobs.c.name, names),
            (jobs.c.partition, partitions),
            (jobs.c.account, accounts),
        ):
            if values:
                stmt = stmt.where(column.in_(list(values)))
        if start_after:
            stmt = stmt.where(sa.or_(jobs.c.end_time == 0, jobs.c.end_time >= start_after))
        if end_before:
            stmt = stmt.where(jobs.c.submit_time <= end_before)
        if limit:
            stmt = stmt.limit(limit)
        with self._reading() as conn:
            return self._jobs_with_events(conn, stmt, with_events=False)

    def purge_jobs(
        self,
        *,
        ended_before: float,
        finished_states: Iterable[int],
        archive_dir: str = "",
        chunk: int = 2000,
    ) -> int:
        """Delete finished jobs that ended before ``ended_before`` (with their events and
        earlier runs); with ``archive_dir``, first append each, whole, as a JSON line to
        ``archive_dir/jobs-YYYY-MM.jsonl`` (the month it ended), made durable before the
        delete commits: a crash between the two archives a job twice, never loses it."""
        states = list(finished_states)
        total = 0
        while True:
            cond = sa.and_(
                jobs.c.state.in_(states), jobs.c.end_time > 0, jobs.c.end_time < ended_before
            )
            with self._reading() as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        sa.select(jobs.c.job_id).where(cond).order_by(jobs.c.job_id).limit(chunk)
                    )
                ]
                if not ids:
                    return total
                if archive_dir:
                    found = self._jobs_with_events(
                        conn, sa.select(jobs.c.data).where(jobs.c.job_id.in_(ids))
                    )
                    archive_jobs(archive_dir, found, self.earlier_runs(ids), message_to_json)
            try:
                with self._writing() as conn:
                    for table in (job_events, job_runs):
                        conn.execute(table.delete().where(table.c.job_id.in_(ids)))
                    conn.execute(jobs.delete().where(jobs.c.job_id.in_(ids)))
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(f"purge failed: {_describe(exc)}") from exc
            total += len(ids)

    def earlier_runs(self, job_ids: Iterable[int]) -> list[pb.Job]:
        """The earlier runs of these jobs (sacct -D), by job id and run."""
        ids = list(job_ids)
        out: list[pb.Job] = []
        with self._reading() as conn:
            for start in range(0, len(ids), 500):
                stmt = (
                    sa.select(job_runs.c.data)
                    .where(job_runs.c.job_id.in_(ids[start : start + 500]))
                    .order_by(job_runs.c.job_id, job_runs.c.run)
                )
                out.extend(pb.Job.FromString(data) for (data,) in conn.execute(stmt))
        return out

    @staticmethod
    def _jobs_with_events(
        conn: Connection, stmt: sa.Select[Any], *, with_events: bool = True
    ) -> list[pb.Job]:
        out: dict[int, pb.Job] = {}
        for (data,) in conn.execute(stmt):
            job = pb.Job.FromString(data)
            out[job.job_id] = job
        if with_events and out:
            ids = list(out)
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = conn.execute(
                    sa.select(job_events)
                    .where(job_events.c.job_id.in_(chunk))
                    .order_by(job_events.c.id)
                )
                for r in rows:
                    out[r.job_id].events.add(
                        time=r.time,
                        event=r.event,
                        from_state=r.from_state,
                        to_state=r.to_state,
                        cause=r.cause,
                        detail=r.detail,
                    )
        return list(out.values())
