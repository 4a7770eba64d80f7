"""Alembic's environment: corral always hands it an open connection (see ctld.storage.migrate)."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
