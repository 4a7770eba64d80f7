"""Every change of an advance reservation with its time (``reservation_log``): the
reservations table keeps only the live ones, and ``corral sim --from-store`` replays
the site's history with the ones that ended.

Sets meta.schema_version to 8.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservation_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_reservation_log_time", "reservation_log", ["time"])
    op.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    op.drop_index("ix_reservation_log_time", "reservation_log")
    op.drop_table("reservation_log")
