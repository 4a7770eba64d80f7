"""ctld's records, tables and rules, without State: the job and node state machines,
nodes, compact records, dependencies, accounting, QOS, usage, priorities, reservations,
authorization, submit checks, failure rules, live figures.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
