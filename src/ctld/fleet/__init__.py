"""What nodes tell ctld: registration, heartbeats, their jobs' reports; their silence
judged; dynamic nodes. What is done to a node (drain, DOWN, resume) is an operation
(ctld/ops/node_ops.py).

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
