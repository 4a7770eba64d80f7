"""The store's tables and the rows one change writes.

Ops are plain data (rows to insert or update, events, drains...) so that the group
commit (ctld/storage/store.py) can merge the ops of many requests into one transaction of a
few ``executemany`` statements. The schema here is the code's; Alembic's migrations
(ctld/storage/migrations) must reach it, and a test compares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from corral.wire import corral_pb2 as pb

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
    # sacct's filters, each with the time window beside it (migration 0006)
    sa.Index("ix_jobs_state_end", "state", "end_time"),
    sa.Index("ix_jobs_user_end", "user", "end_time"),
    sa.Index("ix_jobs_account_end", "account", "end_time"),
    sa.Index("ix_jobs_end_id", "end_time", "job_id"),  # where a window starts, by job id
)

# A requeued job's earlier runs, each as the job stood when that run ended (sacct -D);
# the current run is the jobs row. ``run`` counts from 0 (restart_count of that run).
job_runs = sa.Table(
    "job_runs",
    metadata,
    sa.Column("job_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("run", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("state", sa.Integer, nullable=False),
    sa.Column("start_time", sa.Float, nullable=False),
    sa.Column("end_time", sa.Float, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Index("ix_job_runs_end_time", "end_time"),
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
    sa.Column("cause", sa.Text, nullable=False, server_default=""),  # nodestate's
)

# Operators' State=DOWN (the same columns): it stays DOWN across ctld restarts until RESUME.
node_downs = sa.Table(
    "node_downs",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("reason_time", sa.Float, nullable=False),
    sa.Column("reason_uid", sa.Integer, nullable=False),
    sa.Column("cause", sa.Text, nullable=False, server_default=""),  # nodestate's
)

# Power saving: a node not simply on (powered down, powering up or down, "!" asked) keeps
# that across a ctld restart, which would otherwise judge a powered-down node silent.
node_power = sa.Table(
    "node_power",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("power", sa.Integer, nullable=False),  # pb.NodePower
    sa.Column("since", sa.Float, nullable=False),
    sa.Column("pending", sa.Boolean, nullable=False),  # a power down asked ("!")
    sa.Column("powered_down_s", sa.Float, nullable=False),  # before ``since`` (energy)
    sa.Column("cause", sa.Text, nullable=False, server_default=""),
)

# sacctmgr's records (accounts, users, associations, QOS), each a JSON document keyed by
# its kind and name (an association's name is "account/user", "account/" for the
# account's own); ctld/model/accounting.py reads and writes them.
accounting = sa.Table(
    "accounting",
    metadata,
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(160), primary_key=True),
    sa.Column("data", sa.Text, nullable=False),
)

# Every version of every reservation as it was put, and its deletion (``data`` empty),
# with when: the reservations table keeps only the live ones, and a replay of the
# site's history (corral sim --from-store) needs the ones that ended too. A few rows
# per reservation; kept (migration 0008).
reservation_log = sa.Table(
    "reservation_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Index("ix_reservation_log_time", "time"),
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
    # when the reservation change was made (the reservation log's time; 0: not logged)
    reservations_at: float = 0.0
    drains_put: list[NodeDrain] = field(default_factory=list)
    drains_delete: list[str] = field(default_factory=list)
    downs_put: list[NodeDrain] = field(default_factory=list)  # an operator's State=DOWN
    downs_delete: list[str] = field(default_factory=list)
    power_put: list[NodePower] = field(default_factory=list)
    power_delete: list[str] = field(default_factory=list)  # back to plainly on
    runs: list[dict[str, Any]] = field(default_factory=list)  # job_runs rows
    accounting_put: list[tuple[str, str, str]] = field(default_factory=list)  # kind, name, JSON
    accounting_delete: list[tuple[str, str]] = field(default_factory=list)  # kind, name


@dataclass(frozen=True)
class NodeDrain:
    name: str
    reason: str
    reason_time: float
    reason_uid: int
    cause: str = ""  # the change's cause (ctld/model/nodestate.py): scontrol's, a fault's


@dataclass(frozen=True)
class NodePower:
    name: str
    power: int  # pb.NodePower
    since: float
    pending: bool
    powered_down_s: float
    cause: str = ""


def _job_row(job: pb.Job, held: bytes | None = None) -> dict[str, Any]:
    """The job's row; ``held``: the script and environment of a job kept compact in
    memory (ctld/model/records.py), put back so the row stays whole."""
    bare = pb.Job()
    bare.CopyFrom(job)
    del bare.events[:]
    if held:
        bare.spec.MergeFromString(held)
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


def insert_job(job: pb.Job, held: bytes | None = None) -> Op:
    """Op: a new job with its whole story so far (``held``: see ``_job_row``)."""
    return Op(
        inserts=[_job_row(job, held)], events=[_event_row(job.job_id, ev) for ev in job.events]
    )


def update_job(
    job: pb.Job,
    new_events: Iterable[pb.JobEvent],
    runs: Iterable[pb.Job] = (),
    held: bytes | None = None,
) -> Op:
    """Op: the job's current row plus the events added since it was last written, and
    the runs that ended since (a requeued job's earlier runs, as each stood at its end);
    ``held``: see ``_job_row``."""
    row = _job_row(job, held)
    row["b_job_id"] = row.pop("job_id")
    return Op(
        updates=[row],
        events=[_event_row(job.job_id, ev) for ev in new_events],
        runs=[_run_row(r) for r in runs],
    )


def _run_row(run: pb.Job) -> dict[str, Any]:
    bare = pb.Job()
    bare.CopyFrom(run)
    del bare.events[:]
    bare.spec.ClearField("script")  # the job row keeps them; a run needs what sacct shows
    bare.spec.ClearField("environment")
    return {
        "job_id": run.job_id,
        "run": run.restart_count,
        "state": int(run.state),
        "start_time": run.start_time,
        "end_time": run.end_time,
        "data": bare.SerializeToString(),
    }


_UPDATE_JOB = jobs.update().where(jobs.c.job_id == sa.bindparam("b_job_id"))


def apply_ops(conn: Connection, ops: Iterable[Op]) -> None:
    """All ops of a group commit as four executemany statements (inserts before updates),
    and a statement per rarer row (reservations, drains, DOWNs, accounting)."""
    ops = list(ops)
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for op in ops:
        inserts.extend(op.inserts)
        updates.extend(op.updates)
        events.extend(op.events)
        runs.extend(op.runs)
    if inserts:
        conn.execute(jobs.insert(), inserts)
    if updates:
        conn.execute(_UPDATE_JOB, updates)
    if events:
        conn.execute(job_events.insert(), events)
    if runs:
        conn.execute(job_runs.insert(), runs)
    for op in ops:  # rare: one statement each is fine
        for name in [*op.reservations_delete, *(r.name for r in op.reservations_put)]:
            conn.execute(reservations.delete().where(reservations.c.name == name))
        for resv in op.reservations_put:
            conn.execute(
                reservations.insert(),
                {"name": resv.name, "end_time": resv.end_time, "data": resv.SerializeToString()},
            )
        if op.reservations_at:
            logged = [
                *(
                    {"name": r.name, "time": op.reservations_at, "data": r.SerializeToString()}
                    for r in op.reservations_put
                ),
                *(
                    {"name": n, "time": op.reservations_at, "data": b""}
                    for n in op.reservations_delete
                ),
            ]
            if logged:
                conn.execute(reservation_log.insert(), logged)
        for name in [*op.drains_delete, *(d.name for d in op.drains_put)]:
            conn.execute(node_drains.delete().where(node_drains.c.name == name))
        for name in [*op.downs_delete, *(d.name for d in op.downs_put)]:
            conn.execute(node_downs.delete().where(node_downs.c.name == name))
        for down in op.downs_put:
            conn.execute(node_downs.insert(), _drain_row(down))
        for name in [*op.power_delete, *(p.name for p in op.power_put)]:
            conn.execute(node_power.delete().where(node_power.c.name == name))
        for power in op.power_put:
            conn.execute(node_power.insert(), dataclasses.asdict(power))
        for kind, name in [*op.accounting_delete, *((k, n) for k, n, _ in op.accounting_put)]:
            conn.execute(
                accounting.delete().where(accounting.c.kind == kind, accounting.c.name == name)
            )
        for kind, name, data in op.accounting_put:
            conn.execute(accounting.insert(), {"kind": kind, "name": name, "data": data})
        for drain in op.drains_put:
            conn.execute(node_drains.insert(), _drain_row(drain))


def _drain_row(d: NodeDrain) -> dict[str, Any]:
    return {
        "name": d.name,
        "reason": d.reason,
        "reason_time": d.reason_time,
        "reason_uid": d.reason_uid,
        "cause": d.cause,
    }
