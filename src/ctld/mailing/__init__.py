"""The mail jobs ask for: which change sends what, and sending it.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
