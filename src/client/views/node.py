"""A node of GetNodes (``Node``, its ``Resources`` and GPUs) and a partition of
GetPartitions (``Partition``)."""

from __future__ import annotations

from corral.wire.views import (
    GpuFields,
    NodeFields,
    NodeResourcesFields,
    PartitionFields,
    as_int,
    as_str,
)


class Gpu(GpuFields):
    """A Gpu of a reply, read through typed properties."""

    __slots__ = ()


class Resources(NodeResourcesFields):
    """A NodeResources of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def gpus(self) -> list[Gpu]:
        return [Gpu(x) for x in self.raw.get("gpus") or ()]

    @property
    def sockets(self) -> int:
        return as_int(self.raw.get("sockets", 1))  # unset: one socket

    @property
    def cores_per_socket(self) -> int:
        return as_int(self.raw.get("coresPerSocket", self.cpus))  # unset: every CPU a core

    @property
    def threads_per_core(self) -> int:
        return as_int(self.raw.get("threadsPerCore", 1))


class Node(NodeFields):
    """A Node of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def state_name(self) -> str:
        """'IDLE', 'DOWN', ... (the enum's name without its prefix)."""
        return (as_str(self.raw.get("state")) or "NODE_STATE_UNKNOWN").removeprefix("NODE_STATE_")

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def resources(self) -> Resources:
        return Resources(self.raw.get("resources") or {})

    @property
    def power(self) -> str:
        """NODE_POWER_ON, NODE_POWER_POWERED_DOWN, ... (power saving)."""
        return as_str(self.raw.get("power"))

    @property
    def spare(self) -> bool:
        """Held back as a hot spare of its partition (spare_nodes)."""
        return bool(self.raw.get("spare"))


class Partition(PartitionFields):
    """A Partition of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state", "UP"))

    @property
    def max_time_s(self) -> int:
        """The longest time limit; -1 (unset): no limit."""
        return as_int(self.raw.get("maxTimeS", -1))

    @property
    def default_time_s(self) -> int:
        """The time limit a job gets without one; -1 (unset): none."""
        return as_int(self.raw.get("defaultTimeS", -1))

    @property
    def priority_tier(self) -> int:
        return as_int(self.raw.get("priorityTier", 1))
