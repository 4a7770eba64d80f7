"""The schema before migrations existed (meta.schema_version 1).

A store made by that code has these tables and no alembic_version: ``corral db upgrade``
stamps it with this revision and goes on from here.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
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
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_index("ix_jobs_end_time", "jobs", ["end_time"])
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("from_state", sa.Integer, nullable=False),
        sa.Column("to_state", sa.Integer, nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
    )
    op.create_index("ix_job_events_job", "job_events", ["job_id"])
    op.create_table(
        "reservations",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "node_drains",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("reason_time", sa.Float, nullable=False),
        sa.Column("reason_uid", sa.Integer, nullable=False),
    )
    meta = op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "schema_version", "value": "1"}])


def downgrade() -> None:
    for table in ("meta", "node_drains", "reservations", "job_events", "jobs"):
        op.drop_table(table)
