"""What noded measured of a job or step (JobUsage), and a node's live sample of a
running step (LiveUsage): the views both jobs and steps' stats read."""

from __future__ import annotations

from corral.wire.views import JobUsageFields, LiveUsageFields


class Usage(JobUsageFields):
    """A JobUsage of a reply, read through typed properties."""

    __slots__ = ()


class LiveUsage(LiveUsageFields):
    """A node's last sample of a running step (GetStepStats)."""

    __slots__ = ()

    @property
    def usage(self) -> Usage:
        return Usage(self.raw.get("usage") or {})
