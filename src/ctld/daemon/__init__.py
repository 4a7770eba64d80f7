"""ctld's process: the server that wires store, state, listeners and loops; what it
checks before it listens; its socket directory; its channels to the nodes.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
