"""A job's spec as ctld holds it (``Spec``): what was asked at submit."""

from __future__ import annotations

from corral.wire.views import JobSpecFields, as_int


class Spec(JobSpecFields):
    """A JobSpec of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def array_task_count(self) -> int:
        """How many tasks ``--array`` names (0: not an array), as ctld typed it."""
        return as_int((self.raw.get("arrayTasks") or {}).get("count"))
