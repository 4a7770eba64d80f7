"""The operations every handler calls, and no handler is: end, cancel and requeue a job,
end a step's part, drain, DOWN and resume a node, a lost node's verdict, planned
disruptions, hot spares.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
