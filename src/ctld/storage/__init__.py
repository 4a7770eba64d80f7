"""The durable store: its tables, reads and writes, schema migrations, the lock and
lease on it, the archive, and backup and restore.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
