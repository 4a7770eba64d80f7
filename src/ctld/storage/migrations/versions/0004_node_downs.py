"""Operators' State=DOWN: a node an operator took down stays down across ctld restarts.

Sets meta.schema_version to 4 (a ctld from before migrations refuses this store).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_downs",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("reason_time", sa.Float, nullable=False),
        sa.Column("reason_uid", sa.Integer, nullable=False),
    )
    op.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    op.drop_table("node_downs")
