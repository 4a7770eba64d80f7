"""The store's schema history as Alembic migrations (run by ``corral db upgrade``)."""
