"""A job's life after submit: intake (submit, cancel, signal, hold, update), steps, ends
and requeues, lost nodes' verdicts, planned disruptions, hot spares.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
