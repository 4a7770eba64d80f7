"""sacctmgr's accounting records: accounts, users, associations and QOS with their limits.

Sets meta.schema_version to 3 (a ctld from before migrations refuses this store).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounting",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(160), primary_key=True),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    op.drop_table("accounting")
