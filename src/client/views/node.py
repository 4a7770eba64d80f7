"""A node of GetNodes (``Node``, its ``Resources`` and GPUs) and a partition of
GetPartitions (``Partition``)."""

from __future__ import annotations

from client.views.values import as_float, as_int, as_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class Gpu:
    """A Gpu of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Gpu) -> None:
        self.raw = raw

    @property
    def memory_mb(self) -> int:
        return as_int(self.raw.get("memoryMb"))


class Resources:
    """A NodeResources of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.NodeResources) -> None:
        self.raw = raw

    @property
    def cpus(self) -> int:
        return as_int(self.raw.get("cpus"))

    @property
    def memory_mb(self) -> int:
        return as_int(self.raw.get("memoryMb"))

    @property
    def gpus(self) -> list[Gpu]:
        return [Gpu(x) for x in self.raw.get("gpus") or ()]

    @property
    def features(self) -> list[str]:
        return list(self.raw.get("features") or ())

    @property
    def sockets(self) -> int:
        return as_int(self.raw.get("sockets", 1))  # unset: one socket

    @property
    def cores_per_socket(self) -> int:
        return as_int(self.raw.get("coresPerSocket", self.cpus))  # unset: every CPU a core

    @property
    def threads_per_core(self) -> int:
        return as_int(self.raw.get("threadsPerCore", 1))


class Node:
    """A Node of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Node) -> None:
        self.raw = raw

    @property
    def state_name(self) -> str:
        """'IDLE', 'DOWN', ... (the enum's name without its prefix)."""
        return (as_str(self.raw.get("state")) or "NODE_STATE_UNKNOWN").removeprefix("NODE_STATE_")

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def address(self) -> str:
        return as_str(self.raw.get("address"))

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def reason(self) -> str:
        return as_str(self.raw.get("reason"))

    @property
    def resources(self) -> Resources:
        return Resources(self.raw.get("resources") or {})

    @property
    def alloc_cpus(self) -> int:
        return as_int(self.raw.get("allocCpus"))

    @property
    def alloc_mem_mb(self) -> int:
        return as_int(self.raw.get("allocMemMb"))

    @property
    def alloc_gpus(self) -> int:
        return as_int(self.raw.get("allocGpus"))

    @property
    def partitions(self) -> list[str]:
        return list(self.raw.get("partitions") or ())

    @property
    def last_heartbeat(self) -> float:
        return as_float(self.raw.get("lastHeartbeat"))

    @property
    def boot_time(self) -> float:
        return as_float(self.raw.get("bootTime"))

    @property
    def version(self) -> str:
        return as_str(self.raw.get("version"))

    @property
    def os(self) -> str:
        return as_str(self.raw.get("os"))

    @property
    def reason_time(self) -> float:
        return as_float(self.raw.get("reasonTime"))

    @property
    def job_ids(self) -> list[str]:
        return list(self.raw.get("jobIds") or ())

    @property
    def gpu_type(self) -> str:
        return as_str(self.raw.get("gpuType"))

    @property
    def reason_user(self) -> str:
        return as_str(self.raw.get("reasonUser"))

    @property
    def reason_uid(self) -> int:
        return as_int(self.raw.get("reasonUid"))

    @property
    def reservation(self) -> str:
        return as_str(self.raw.get("reservation"))

    @property
    def maint(self) -> bool:
        return bool(self.raw.get("maint"))

    @property
    def power(self) -> str:
        """NODE_POWER_ON, NODE_POWER_POWERED_DOWN, ... (power saving)."""
        return as_str(self.raw.get("power"))

    @property
    def power_down_pending(self) -> bool:
        return bool(self.raw.get("powerDownPending"))

    @property
    def cloud(self) -> bool:
        return bool(self.raw.get("cloud"))

    @property
    def dynamic(self) -> bool:
        return bool(self.raw.get("dynamic"))

    @property
    def powered_down_s(self) -> float:
        return as_float(self.raw.get("poweredDownS"))

    @property
    def energy_saved_j(self) -> float:
        return as_float(self.raw.get("energySavedJ"))

    @property
    def spare(self) -> bool:
        """Held back as a hot spare of its partition (spare_nodes)."""
        return bool(self.raw.get("spare"))

    @property
    def not_responding(self) -> bool:
        return bool(self.raw.get("notResponding"))

    @property
    def shards_per_gpu(self) -> int:
        return as_int(self.raw.get("shardsPerGpu"))

    @property
    def alloc_shards(self) -> int:
        return as_int(self.raw.get("allocShards"))


class Partition:
    """A Partition of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Partition) -> None:
        self.raw = raw

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def nodes(self) -> str:
        return as_str(self.raw.get("nodes"))

    @property
    def is_default(self) -> bool:
        return bool(self.raw.get("isDefault"))

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
    def max_nodes(self) -> int:
        return as_int(self.raw.get("maxNodes"))

    @property
    def total_nodes(self) -> int:
        return as_int(self.raw.get("totalNodes"))

    @property
    def total_cpus(self) -> int:
        return as_int(self.raw.get("totalCpus"))

    @property
    def total_gpus(self) -> int:
        return as_int(self.raw.get("totalGpus"))

    @property
    def priority_tier(self) -> int:
        return as_int(self.raw.get("priorityTier", 1))

    @property
    def allow_accounts(self) -> list[str]:
        return list(self.raw.get("allowAccounts") or ())
