"""What ctld knows (State) and the one way it changes (the commit step), with the
pending reasons it settles and the signals it sends nodes.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
