"""Each node's power-saving state (powered down, powering up or down, a power down asked
for), so that a restarted ctld keeps its powered-down nodes powered down instead of
judging them silent and DOWN.

Sets meta.schema_version to 7.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_power",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("power", sa.Integer, nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("pending", sa.Boolean, nullable=False),
        sa.Column("powered_down_s", sa.Float, nullable=False),
        sa.Column("cause", sa.Text, nullable=False, server_default=""),
    )
    op.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    op.drop_table("node_power")
