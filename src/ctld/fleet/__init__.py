"""What nodes tell ctld and what ctld decides of them: registration, heartbeats,
reports, silence, dynamic nodes.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
