"""The store's reads: loading ctld's state at start, sacct's and sreport's queries,
fair-share's usage, and the purge of old finished jobs (with their archive).

``StoreQueries`` is the half of ``ctld.storage.store.Store`` that reads (from any thread, each
on a connection of its own); the other half is the engine and the group-commit writer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError, StoreUnavailable
from corral.jobspec import fill
from corral.wire import corral_pb2 as pb
from ctld.codec.jsonmap import message_to_json
from ctld.storage.archive import archive_jobs
from ctld.storage.store_rows import (
    NodeDrain,
    NodePower,
    accounting,
    job_events,
    job_runs,
    jobs,
    node_downs,
    node_drains,
    node_power,
    reservations,
)


def job_from_row(data: bytes) -> pb.Job:
    """A stored job, its --signal, --array and --dependency typed (a row written
    before the typed fields existed gets them now, from the same parser)."""
    job = pb.Job.FromString(data)
    fill(job.spec)
    return job


def window_start(conn: Connection, start_after: float) -> int | None:
    """The lowest job id in sacct's time window (running, or ended at ``start_after``
    or later); None when the window is empty.

    sacct pages in job id order, so without this bound a page of the day's jobs walks
    the whole history before them. Each half is a range of ``ix_jobs_end_id``; the
    ``+ 0`` keeps SQLite from answering ``min`` by walking the primary key instead."""
    lows = [
        conn.execute(sa.select(sa.func.min(jobs.c.job_id + 0)).where(cond)).scalar()
        for cond in (jobs.c.end_time == 0, jobs.c.end_time >= start_after)
    ]
    found = [int(v) for v in lows if v is not None]
    return min(found) if found else None


def is_trouble(exc: BaseException) -> bool:
    """The database is away or full (it may come back), not a bad request."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError)


def describe(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


@contextlib.contextmanager
def _read_errors(engine: Engine) -> Iterator[Connection]:
    """A read connection whose database errors leave as StoreError, with the cause."""
    try:
        with engine.connect() as conn:
            yield conn
    except sa.exc.SQLAlchemyError as exc:
        if is_trouble(exc):
            raise StoreUnavailable(f"the store cannot answer: {describe(exc)}") from exc
        raise StoreError(f"store query failed: {describe(exc)}") from exc


class StoreQueries:
    """Reads on ``engine``; the purge writes through ``_writing`` (fenced, as every write)."""

    engine: Engine

    def _writing(self) -> contextlib.AbstractContextManager[Connection]:
        raise NotImplementedError  # the Store's

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
            return [NodeDrain(r.name, r.reason, r.reason_time, r.reason_uid, r.cause) for r in rows]

    def load_downs(self) -> list[NodeDrain]:
        """Nodes an operator took DOWN (same fields as a drain)."""
        with self._reading() as conn:
            rows = conn.execute(sa.select(node_downs).order_by(node_downs.c.name))
            return [NodeDrain(r.name, r.reason, r.reason_time, r.reason_uid, r.cause) for r in rows]

    def load_power(self) -> list[NodePower]:
        """Nodes not simply on: powered down, powering up or down, or a power down asked."""
        with self._reading() as conn:
            rows = conn.execute(sa.select(node_power).order_by(node_power.c.name))
            return [
                NodePower(r.name, r.power, r.since, bool(r.pending), r.powered_down_s, r.cause)
                for r in rows
            ]

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
            return [job_from_row(data) for (data,) in conn.execute(stmt)]

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
                out.extend(job_from_row(data) for (data,) in conn.execute(stmt))
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
        with_events: bool = False,
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
            if start_after and not job_ids:
                low = window_start(conn, start_after)
                if low is None:
                    return []
                stmt = stmt.where(jobs.c.job_id >= low)
            return self._jobs_with_events(conn, stmt, with_events=with_events)

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
                raise StoreError(f"purge failed: {describe(exc)}") from exc
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
                out.extend(job_from_row(data) for (data,) in conn.execute(stmt))
        return out

    def job_story(self, job_id: int) -> pb.Job | None:
        """One stored job with its events (the web page's job page, once the job has
        left memory)."""
        with self._reading() as conn:
            found = self._jobs_with_events(
                conn, sa.select(jobs.c.data).where(jobs.c.job_id == job_id)
            )
        return found[0] if found else None

    @staticmethod
    def _jobs_with_events(
        conn: Connection, stmt: sa.Select[Any], *, with_events: bool = True
    ) -> list[pb.Job]:
        out: dict[int, pb.Job] = {}
        for (data,) in conn.execute(stmt):
            job = job_from_row(data)
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
