"""What noded measured of a job or step (JobUsage), and a node's live sample of a
running step (LiveUsage): the views both jobs and steps' stats read."""

from __future__ import annotations

from client.views.values import as_float, as_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class Usage:
    """A JobUsage of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.JobUsage) -> None:
        self.raw = raw

    @property
    def max_rss_kb(self) -> int:
        return as_int(self.raw.get("maxRssKb"))

    @property
    def ave_rss_kb(self) -> int:
        return as_int(self.raw.get("aveRssKb"))

    @property
    def user_cpu_s(self) -> float:
        return as_float(self.raw.get("userCpuS"))

    @property
    def system_cpu_s(self) -> float:
        return as_float(self.raw.get("systemCpuS"))

    @property
    def gpu_util_max(self) -> float:
        return as_float(self.raw.get("gpuUtilMax"))

    @property
    def gpu_util_mean(self) -> float:
        return as_float(self.raw.get("gpuUtilMean"))

    @property
    def gpu_mem_max_mb(self) -> float:
        return as_float(self.raw.get("gpuMemMaxMb"))

    @property
    def gpu_mem_mean_mb(self) -> float:
        return as_float(self.raw.get("gpuMemMeanMb"))

    @property
    def samples(self) -> int:
        return as_int(self.raw.get("samples"))


class LiveUsage:
    """A node's last sample of a running step (GetStepStats)."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.LiveUsage) -> None:
        self.raw = raw

    @property
    def usage(self) -> Usage:
        return Usage(self.raw.get("usage") or {})

    @property
    def max_vmem_kb(self) -> int:
        return as_int(self.raw.get("maxVmemKb"))

    @property
    def ave_vmem_kb(self) -> int:
        return as_int(self.raw.get("aveVmemKb"))

    @property
    def pids(self) -> list[int]:
        return list(self.raw.get("pids") or ())

    @property
    def ntasks(self) -> int:
        return as_int(self.raw.get("ntasks"))

    @property
    def first_rank(self) -> int:
        return as_int(self.raw.get("firstRank"))
