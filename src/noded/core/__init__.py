"""noded's pure core: the job machine and the step machine, their events and actions,
their state and rules; no process, file, socket or clock (the executors around them,
launcher and steps, carry their actions out).

What it may import (the standard library's pure parts, corral, itself):
docs/architecture.md, "noded inside" (held by tests/unit/test_job_machine.py).
"""
