"""The scheduling core: a pure function from a Snapshot to a Plan.

Imports only the standard library and its own plain types: no grpc, no
sqlalchemy, no asyncio, no clock (``now`` is part of the snapshot). ctld builds the
snapshot, calls ``schedule`` and applies the plan; the simulator calls the same
function on virtual time. ``priority`` and ``fairshare`` are pure too: ctld uses them
to order the queue it puts in the snapshot, and ``sprio``/``sshare`` show their parts.
"""

from ctld.sched.backfill import schedule
from ctld.sched.model import (
    INFINITY,
    Claim,
    Forecast,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    Preemption,
    QosView,
    ReservationView,
    RunningView,
    Settings,
    Snapshot,
    Start,
)
from ctld.sched.shape import Shape, job_shape

__all__ = [
    "INFINITY",
    "Claim",
    "Forecast",
    "JobRequest",
    "NodeView",
    "PartitionView",
    "Placement",
    "Plan",
    "Preemption",
    "QosView",
    "ReservationView",
    "RunningView",
    "Settings",
    "Shape",
    "Snapshot",
    "Start",
    "job_shape",
    "schedule",
]
