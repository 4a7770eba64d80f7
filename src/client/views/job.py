"""A job of a reply (GetJobs, QueryAccounting, CreateStep): ``Job``, its node
allocations and its priority factors; its spec and steps are views of their own."""

from __future__ import annotations

from client.views.spec import Spec
from client.views.step import Step
from client.views.usage import Usage
from corral.wire.views import (
    InterruptionFields,
    JobFields,
    NodeAllocationFields,
    PriorityFactorsFields,
    as_int,
    as_str,
)


class Allocation(NodeAllocationFields):
    """A NodeAllocation of a reply, read through typed properties."""

    __slots__ = ()


class Factors(PriorityFactorsFields):
    """A PriorityFactors of a reply, read through typed properties."""

    __slots__ = ()


class Interruption(InterruptionFields):
    """An Interruption of a reply: one requeued run and what it cost."""

    __slots__ = ()


#: Each wire state name met, as printed: several columns read it for every row.
_STATE_NAMES: dict[str, str] = {}


class Job(JobFields):
    """A Job of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def ref(self) -> str:
        """How Slurm names a job: ``123``, or ``120_3`` for task 3 of array 120."""
        if self.is_array_task:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    @property
    def is_array_task(self) -> bool:
        return "arrayTaskId" in self.raw

    @property
    def state_name(self) -> str:
        """'PENDING', 'RUNNING', ... (the enum's name without its prefix)."""
        raw = as_str(self.raw.get("state"))
        name = _STATE_NAMES.get(raw)
        if name is None:
            name = _STATE_NAMES[raw] = (raw or "JOB_STATE_PENDING").removeprefix("JOB_STATE_")
        return name

    @property
    def spec(self) -> Spec:
        return Spec(self.raw.get("spec") or {})

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def hold(self) -> str:
        return as_str(self.raw.get("hold"))

    @property
    def allocations(self) -> list[Allocation]:
        return [Allocation(x) for x in self.raw.get("allocations") or ()]

    @property
    def cancelled_by(self) -> int | None:
        """Who cancelled it (``cancelled_by_uid``); None when not recorded (older
        records, or root's 0)."""
        value = self.raw.get("cancelledByUid")
        return None if value is None else as_int(value)

    @property
    def priority_factors(self) -> Factors:
        return Factors(self.raw.get("priorityFactors") or {})

    @property
    def usage(self) -> Usage:
        return Usage(self.raw.get("usage") or {})

    @property
    def interruptions(self) -> list[Interruption]:
        return [Interruption(x) for x in self.raw.get("interruptions") or ()]

    @property
    def steps(self) -> list[Step]:
        return [Step(x) for x in self.raw.get("steps") or ()]
