"""Which cores a job is bound to, and its GPU figures: small bookkeeping for the launcher."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from noded.gpu import GpuSample


class CoreAllocator:
    """Hands out this host's cores to jobs, least-loaded first.

    A fake node may claim more CPUs than the host has; cores are then shared, which
    is all a laptop can do, and the binding still keeps a job off the others' cores
    whenever the host is big enough.
    """

    def __init__(self, cores: Iterable[int] | None = None) -> None:
        self.cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
        self.load = dict.fromkeys(self.cores, 0)
        self.by_job: dict[int, list[int]] = {}

    def take(self, job_id: int, count: int) -> list[int]:
        count = min(max(count, 1), len(self.cores))
        chosen = sorted(sorted(self.cores, key=lambda c: (self.load[c], c))[:count])
        for c in chosen:
            self.load[c] += 1
        self.by_job[job_id] = chosen
        return chosen

    def claim(self, job_id: int, cores: Iterable[int]) -> list[int]:
        """The cores a taken-over job was bound to (an earlier noded chose them)."""
        chosen = sorted(c for c in set(cores) if c in self.load)
        for c in chosen:
            self.load[c] += 1
        self.by_job[job_id] = chosen
        return chosen

    def release(self, job_id: int) -> None:
        for c in self.by_job.pop(job_id, []):
            self.load[c] = max(0, self.load[c] - 1)


@dataclass
class GpuStats:
    """Peak and mean utilization and memory of a job's GPUs over its samples."""

    util_max: float = 0.0
    util_sum: float = 0.0
    mem_max_mb: float = 0.0
    mem_sum_mb: float = 0.0
    count: int = 0

    def add(self, samples: Iterable[GpuSample]) -> None:
        for s in samples:
            self.util_max = max(self.util_max, s.util_pct)
            self.mem_max_mb = max(self.mem_max_mb, s.memory_used_mb)
            self.util_sum += s.util_pct
            self.mem_sum_mb += s.memory_used_mb
            self.count += 1

    @property
    def util_mean(self) -> float:
        return self.util_sum / self.count if self.count else 0.0

    @property
    def mem_mean_mb(self) -> float:
        return self.mem_sum_mb / self.count if self.count else 0.0
