"""Each earlier run of a requeued job (sacct -D), and sacct's account filter indexed.

Also sets meta.schema_version to 2, so a ctld from before migrations (which checks only
that number) refuses this store instead of writing to a schema it does not know.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_runs",
        sa.Column("job_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("run", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("state", sa.Integer, nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_jobs_account", "jobs", ["account"])
    op.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    op.drop_index("ix_jobs_account", "jobs")
    op.drop_table("job_runs")
