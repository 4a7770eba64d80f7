"""A job step (``Step``, its ``StepNode`` placements and ``StepSpec``) and a step's
live figures per node (``StepStat``, ``NodeUsage``: GetStepStats)."""

from __future__ import annotations

from client.views.usage import LiveUsage
from corral.wire.views import (
    NodeUsageFields,
    StepFields,
    StepNodeFields,
    StepSpecFields,
    StepStatFields,
    as_str,
)


class StepNode(StepNodeFields):
    """A StepNode of a reply, read through typed properties."""

    __slots__ = ()


class StepSpec(StepSpecFields):
    """A StepSpec of a reply, read through typed properties."""

    __slots__ = ()


class Step(StepFields):
    """A Step of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def state_name(self) -> str:
        """'RUNNING', 'COMPLETED', ... (the enum's name without its prefix)."""
        return (as_str(self.raw.get("state")) or "JOB_STATE_PENDING").removeprefix("JOB_STATE_")

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def reason(self) -> str:
        """A node's refusal to start it (a container not made), else empty."""
        return as_str(self.raw.get("reason"))

    @property
    def nodes(self) -> list[StepNode]:
        return [StepNode(x) for x in self.raw.get("nodes") or ()]

    @property
    def spec(self) -> StepSpec:
        return StepSpec(self.raw.get("spec") or {})


class StepStat(StepStatFields):
    """A StepStat of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def nodes(self) -> list[NodeUsage]:
        return [NodeUsage(x) for x in self.raw.get("nodes") or ()]


class NodeUsage(NodeUsageFields):
    """A NodeUsage of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def live(self) -> LiveUsage:
        return LiveUsage(self.raw.get("live") or {})
