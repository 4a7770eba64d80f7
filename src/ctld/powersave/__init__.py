"""Power saving (SuspendProgram/ResumeProgram): the manager, its decisions, its
programs, the energy it saved.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
