"""What clients ask of jobs and steps: intake (submit, cancel, signal, hold, update),
srun's and salloc's steps (step_ops) and their layouts (steps). How a job ends or goes
back to the queue is an operation (ctld/ops).

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
