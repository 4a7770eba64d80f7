"""The scheduling loop around the pure core (ctld/sched): the snapshot it reads,
applying its plan (starts, preemptions), the reads that run the core (queries,
corral why), and scontrol's reservations.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
