"""proto3's JSON mapping, fast, and server-side field masks.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
