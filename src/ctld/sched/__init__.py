"""The scheduling core: a pure function from a Snapshot to a Plan.

Imports only the standard library and its own plain types: no grpc, no
sqlalchemy, no asyncio, no clock (``now`` is part of the snapshot). ctld builds the
snapshot, calls ``schedule`` and applies the plan; the simulator calls the same
function on virtual time.
"""

from ctld.sched.firstfit import schedule
from ctld.sched.model import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    Snapshot,
    Start,
)
from ctld.sched.shape import Shape, job_shape

__all__ = [
    "JobRequest",
    "NodeView",
    "PartitionView",
    "Placement",
    "Plan",
    "Shape",
    "Snapshot",
    "Start",
    "job_shape",
    "schedule",
]
