# ctld's store as it was before migrations (schema version 1), kept verbatim so tests
# make a database exactly as that code did. Do not change it.
"""The durable store: jobs and their stories, through SQLAlchemy Core.

Write-ahead: ctld commits a change here before it acknowledges it or acts on it.
All writes go through one writer thread that takes every commit request queued
while the previous transaction was being made durable and commits them together
(group commit): one fsync for a whole burst of submits instead of one per job.
Requests commit in the order they were queued, so a job's RUNNING row can never
become durable before its submission.

Rows keep the columns sacct filters on; the full job is the ``data`` blob (the
serialized corral.v1.Job without its events, which live in ``job_events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError
from corral.wire import corral_pb2 as pb

SCHEMA_VERSION = 1
MAX_BATCH = 2048  # commit requests per transaction

metadata = sa.MetaData()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("job_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("user", sa.String(64), nullable=False),
    sa.Column("uid", sa.Integer, nullable=False),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("partition", sa.String(64), nullable=False),
    sa.Column("account", sa.String(64), nullable=False),
    sa.Column("state", sa.Integer, nullable=False),
    sa.Column("submit_time", sa.Float, nullable=False),
    sa.Column("start_time", sa.Float, nullable=False),
    sa.Column("end_time", sa.Float, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Index("ix_jobs_state", "state"),
    sa.Index("ix_jobs_user", "user"),
    sa.Index("ix_jobs_end_time", "end_time"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("from_state", sa.Integer, nullable=False),
    sa.Column("to_state", sa.Integer, nullable=False),
    sa.Column("cause", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Index("ix_job_events_job", "job_id"),
)

reservations = sa.Table(
    "reservations",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("end_time", sa.Float, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

# Operator and health drains: a drained node stays drained across ctld restarts.
node_drains = sa.Table(
    "node_drains",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("reason_time", sa.Float, nullable=False),
    sa.Column("reason_uid", sa.Integer, nullable=False),
)

meta = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


@dataclass
class Op:
    """Rows one change writes; ops are data so a group commit can merge them."""

    inserts: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    reservations_put: list[pb.Reservation] = field(default_factory=list)
    reservations_delete: list[str] = field(default_factory=list)
    drains_put: list[NodeDrain] = field(default_factory=list)
    drains_delete: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NodeDrain:
    name: str
    reason: str
    reason_time: float
    reason_uid: int


def _job_row(job: pb.Job) -> dict[str, Any]:
    bare = pb.Job()
    bare.CopyFrom(job)
    del bare.events[:]
    return {
        "job_id": job.job_id,
        "user": job.user,
        "uid": job.uid,
        "name": job.spec.name,
        "partition": job.partition,
        "account": job.account,
        "state": int(job.state),
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "data": bare.SerializeToString(),
    }


def _event_row(job_id: int, ev: pb.JobEvent) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "time": ev.time,
        "event": ev.event,
        "from_state": int(ev.from_state),
        "to_state": int(ev.to_state),
        "cause": ev.cause,
        "detail": ev.detail,
    }


def insert_job(job: pb.Job) -> Op:
    """Op: a new job with its whole story so far."""
    return Op(inserts=[_job_row(job)], events=[_event_row(job.job_id, ev) for ev in job.events])


def update_job(job: pb.Job, new_events: Iterable[pb.JobEvent]) -> Op:
    """Op: the job's current row plus the events added since it was last written."""
    row = _job_row(job)
    row["b_job_id"] = row.pop("job_id")
    return Op(updates=[row], events=[_event_row(job.job_id, ev) for ev in new_events])


_UPDATE_JOB = jobs.update().where(jobs.c.job_id == sa.bindparam("b_job_id"))


def _apply(conn: Connection, ops: Iterable[Op]) -> None:
    """All ops of a group commit as three executemany statements (inserts before updates)."""
    ops = list(ops)
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for op in ops:
        inserts.extend(op.inserts)
        updates.extend(op.updates)
        events.extend(op.events)
    if inserts:
        conn.execute(jobs.insert(), inserts)
    if updates:
        conn.execute(_UPDATE_JOB, updates)
    if events:
        conn.execute(job_events.insert(), events)
    for op in ops:  # rare: one statement each is fine
        for name in [*op.reservations_delete, *(r.name for r in op.reservations_put)]:
            conn.execute(reservations.delete().where(reservations.c.name == name))
        for resv in op.reservations_put:
            conn.execute(
                reservations.insert(),
                {"name": resv.name, "end_time": resv.end_time, "data": resv.SerializeToString()},
            )
        for name in [*op.drains_delete, *(d.name for d in op.drains_put)]:
            conn.execute(node_drains.delete().where(node_drains.c.name == name))
        for drain in op.drains_put:
            conn.execute(
                node_drains.insert(),
                {
                    "name": drain.name,
                    "reason": drain.reason,
                    "reason_time": drain.reason_time,
                    "reason_uid": drain.reason_uid,
                },
            )


@dataclass
class _Request:
    ops: list[Op]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


class Store:
    """The engine, the schema and the group-commit writer."""

    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL") -> None:
        self.url = url
        self.engine: Engine = self._make_engine(url, sqlite_synchronous)
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self.commits = 0  # transactions made durable
        self.requests = 0  # commit requests served (>= commits under load)

    @staticmethod
    def _make_engine(url: str, synchronous: str) -> Engine:
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
        return sa.create_engine(url, pool_pre_ping=True)

    def open(self) -> None:
        try:
            metadata.create_all(self.engine)
            self._private_file()
            with self.engine.begin() as conn:
                row = conn.execute(
                    sa.select(meta.c.value).where(meta.c.key == "schema_version")
                ).first()
                if row is None:
                    conn.execute(
                        meta.insert(), {"key": "schema_version", "value": str(SCHEMA_VERSION)}
                    )
                elif int(row[0]) != SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.url}: schema version {row[0]}, this ctld knows {SCHEMA_VERSION}"
                    )
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store {self.url}: {exc}") from exc
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
        self._writer.start()

    def _private_file(self) -> None:
        """The store holds every job's script and environment: owner-only (and its WAL)."""
        url = sa.engine.make_url(self.url)
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
        self.engine.dispose()

    # ------------------------------------------------------------ writes

    def commit(self, *ops: Op) -> asyncio.Future[None]:
        """Queue ops for the next group commit; the future resolves once they are durable."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Request(list(ops), loop, fut))
        return fut

    def _write_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
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
            self._commit_batch(batch)
            if stop:
                return

    def _commit_batch(self, batch: list[_Request]) -> None:
        try:
            with self.engine.begin() as conn:
                _apply(conn, (op for req in batch for op in req.ops))
        except Exception as exc:  # isolate the request that failed; the rest still commit
            if len(batch) == 1:
                self._finish(batch[0], StoreError(f"store commit failed: {exc}"))
                return
            for req in batch:
                try:
                    with self.engine.begin() as conn:
                        _apply(conn, req.ops)
                except Exception as exc:
                    self._finish(req, StoreError(f"store commit failed: {exc}"))
                else:
                    self.commits += 1
                    self._finish(req, None)
            self.requests += len(batch)
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

    def next_job_id(self) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(sa.func.max(jobs.c.job_id))).scalar()
        return int(value or 0) + 1

    def load_jobs(self, *, active_states: Iterable[int], finished_after: float) -> list[pb.Job]:
        """Active jobs, and finished ones that ended after ``finished_after``, with stories."""
        cond = sa.or_(jobs.c.state.in_(list(active_states)), jobs.c.end_time > finished_after)
        with self.engine.connect() as conn:
            return self._jobs_with_events(conn, sa.select(jobs.c.data).where(cond))

    def load_reservations(self) -> list[pb.Reservation]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(reservations.c.data).order_by(reservations.c.name))
            return [pb.Reservation.FromString(data) for (data,) in rows]

    def load_drains(self) -> list[NodeDrain]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(node_drains).order_by(node_drains.c.name))
            return [NodeDrain(r.name, r.reason, r.reason_time, r.reason_uid) for r in rows]

    def finished_since(self, horizon: float) -> list[pb.Job]:
        """Jobs that ran and ended after ``horizon`` (what fair-share usage is made of)."""
        stmt = sa.select(jobs.c.data).where(jobs.c.end_time > horizon, jobs.c.start_time > 0)
        with self.engine.connect() as conn:
            return self._jobs_with_events(conn, stmt, with_events=False)

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
    ) -> list[pb.Job]:
        stmt = sa.select(jobs.c.data).order_by(jobs.c.job_id)
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
        with self.engine.connect() as conn:
            return self._jobs_with_events(conn, stmt, with_events=False)

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
