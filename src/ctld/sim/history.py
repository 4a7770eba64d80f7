"""The site's own history, read from the accounting store (``corral sim --from-store``).

Read-only: the jobs of a time window as the store keeps them (each job's final row,
its earlier runs if it was requeued, its holds and releases from its story), the jobs
that ended before the window (the fair-share usage and run-time history a ctld started
then would have had), every version of every advance reservation (the reservation
log, and the live ones), and sacctmgr's records. Nothing here writes: a SQLite store
is opened read-only, so a replay can run beside a live ctld.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.storage.store import normalize_url
from ctld.storage.store_queries import describe, job_from_row
from ctld.storage.store_rows import (
    accounting,
    job_events,
    job_runs,
    jobs,
    reservation_log,
    reservations,
)

# jobs that ended this many half-lives before the window still weigh in fair-share
USAGE_HALF_LIVES = 8


@dataclass(frozen=True)
class ReservationVersion:
    """A reservation as it stood from ``since`` until ``until`` (a later version, its
    deletion, or for ever)."""

    since: float
    until: float
    resv: pb.Reservation


@dataclass
class History:
    """What the store says happened in [start, end)."""

    start: float
    end: float
    read_at: float  # when the store was read: running jobs' run times are cut there
    jobs: list[pb.Job] = field(default_factory=list)  # submitted before end, active in it
    earlier_runs: dict[int, list[pb.Job]] = field(default_factory=dict)
    holds: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # held spans
    before: list[pb.Job] = field(default_factory=list)  # ended before start (seeding)
    reservations: list[ReservationVersion] = field(default_factory=list)
    accounting: list[tuple[str, str, str]] = field(default_factory=list)


def open_engine(url: str) -> Engine:
    """An engine on the store at ``url`` that cannot write (SQLite opened read-only)."""
    try:
        parsed = sa.engine.make_url(normalize_url(url))
    except sa.exc.ArgumentError:
        raise StoreError(f"{url!r}: not a store URL (sqlite:///PATH or postgresql://...)") from None
    shown = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = parsed.database or ""
        if not path or path == ":memory:":
            raise StoreError(f"{shown}: not a store file")
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise StoreError(f"{shown}: cannot read the store: {exc.strerror}") from None
        return sa.create_engine(
            "sqlite://", creator=lambda: _sqlite_read_only(path), poolclass=sa.pool.NullPool
        )
    if backend != "postgresql":
        raise StoreError(f"{shown}: only sqlite:///PATH and postgresql://... stores are read")
    return sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)


def _sqlite_read_only(path: str) -> object:
    import pathlib
    import sqlite3

    return sqlite3.connect(f"{pathlib.Path(path).resolve().as_uri()}?mode=ro", uri=True)


def read(
    engine: Engine,
    start: float | None = None,
    end: float | None = None,
    usage_horizon_s: float = 0.0,
) -> History:
    """The history of [start, end) (None: from the first job, to now).

    ``usage_horizon_s``: how far before ``start`` finished jobs are read for fair-share
    and run-time predictions (default: USAGE_HALF_LIVES weeks)."""
    read_at = time.time()
    try:
        with engine.connect() as conn:
            return _read(conn, start, end, read_at, usage_horizon_s)
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"cannot read the store: {describe(exc)}") from None


def _read(
    conn: Connection, start: float | None, end: float | None, read_at: float, horizon_s: float
) -> History:
    first = conn.execute(sa.select(sa.func.min(jobs.c.submit_time))).scalar()
    lo = float(start if start is not None else (first or read_at))
    hi = float(end if end is not None else read_at)
    if hi <= lo:
        raise StoreError(f"the window is empty: it ends ({hi:.0f}) before it starts ({lo:.0f})")
    history = History(lo, hi, read_at)
    active = sa.or_(
        jobs.c.end_time == 0,
        jobs.c.end_time > lo,
        jobs.c.state.in_([int(s) for s in js.ACTIVE]),
    )
    stmt = sa.select(jobs.c.data).where(jobs.c.submit_time < hi, active)
    history.jobs = sorted(
        (job_from_row(d) for (d,) in conn.execute(stmt)), key=lambda j: (j.submit_time, j.job_id)
    )
    ids = [j.job_id for j in history.jobs]
    history.earlier_runs = _earlier_runs(conn, ids)
    history.holds = _holds(conn, ids, read_at)
    horizon = lo - (horizon_s or USAGE_HALF_LIVES * 7 * 86400)
    done = sa.select(jobs.c.data).where(
        jobs.c.end_time > horizon, jobs.c.end_time <= lo, jobs.c.end_time > 0
    )
    history.before = sorted(
        (job_from_row(d) for (d,) in conn.execute(done)), key=lambda j: j.end_time
    )
    history.reservations = _reservations(conn)
    history.accounting = [
        (r.kind, r.name, r.data)
        for r in conn.execute(sa.select(accounting).order_by(accounting.c.kind, accounting.c.name))
    ]
    return history


def _chunks(ids: list[int], size: int = 500) -> Iterable[list[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def _earlier_runs(conn: Connection, ids: list[int]) -> dict[int, list[pb.Job]]:
    out: dict[int, list[pb.Job]] = {}
    for chunk in _chunks(ids):
        stmt = (
            sa.select(job_runs.c.data)
            .where(job_runs.c.job_id.in_(chunk))
            .order_by(job_runs.c.job_id, job_runs.c.run)
        )
        for (data,) in conn.execute(stmt):
            run = job_from_row(data)
            out.setdefault(run.job_id, []).append(run)
    return out


def _holds(
    conn: Connection, ids: list[int], read_at: float
) -> dict[int, list[tuple[float, float]]]:
    """Each job's held spans, from its story's held and released events (a hold never
    released lasts past the read)."""
    out: dict[int, list[tuple[float, float]]] = {}
    since: dict[int, float] = {}
    for chunk in _chunks(ids):
        stmt = (
            sa.select(job_events.c.job_id, job_events.c.time, job_events.c.event)
            .where(
                job_events.c.job_id.in_(chunk),
                job_events.c.event.in_(["held", "released", "started"]),
            )
            .order_by(job_events.c.id)
        )
        for job_id, at, event in conn.execute(stmt):
            if event == "held":
                since.setdefault(job_id, at)
            elif job_id in since:  # released, or started (a requeue's hold ends there)
                out.setdefault(job_id, []).append((since.pop(job_id), at))
    for job_id, at in since.items():
        out.setdefault(job_id, []).append((at, float("inf")))
    return out


def _reservations(conn: Connection) -> list[ReservationVersion]:
    """Every version of every reservation: the log's, then any live one the log does not
    know (made before the log existed), from its own start."""
    versions: list[ReservationVersion] = []
    last: dict[str, tuple[float, pb.Reservation | None]] = {}
    stmt = sa.select(reservation_log).order_by(reservation_log.c.time, reservation_log.c.id)
    for row in conn.execute(stmt):
        before = last.get(row.name)
        if before is not None and before[1] is not None:
            versions.append(ReservationVersion(before[0], row.time, before[1]))
        last[row.name] = (row.time, pb.Reservation.FromString(row.data) if row.data else None)
    for at, resv in last.values():
        if resv is not None:
            versions.append(ReservationVersion(at, float("inf"), resv))
    for (data,) in conn.execute(sa.select(reservations.c.data)):
        resv = pb.Reservation.FromString(data)
        if resv.name not in last:
            versions.append(ReservationVersion(resv.start_time, float("inf"), resv))
    return versions
