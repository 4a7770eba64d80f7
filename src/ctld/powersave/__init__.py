"""Power saving (SuspendProgram/ResumeProgram): the manager and its programs. Its
decisions and the energy it saved are read-only rules (ctld/model/power_plan.py,
power_energy.py), which the scheduler's snapshot and the reads use too.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
