"""sacctmgr's requests over the accounting database: words, lists, changes.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
