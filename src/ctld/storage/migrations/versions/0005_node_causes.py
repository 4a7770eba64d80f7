"""A drain's and an operator's DOWN's cause (the node state machine's: who or what made
the change), kept with the row so that a restarted ctld still shows it.

Sets meta.schema_version to 5 (a ctld from before migrations refuses this store).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("node_drains", "node_downs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("cause", sa.Text, nullable=False, server_default=""))
    op.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    for table in ("node_drains", "node_downs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("cause")
