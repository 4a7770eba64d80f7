"""GPU samples from noded's heartbeats: each GPU now, and each job's series over time.

noded samples every GPU of its node for each heartbeat (``HeartbeatRequest.gpus``).
ctld keeps the last sample of each GPU, with when it came (the web page's cluster
view), and, per job, a bounded series of each of its GPUs (the web page's job page).
The series live in memory only: a restarted ctld starts them again, and they go when
the job leaves memory. A series holds at most ``MAX_POINTS`` points; when full, it
halves its resolution (pairs merged: mean utilization, peak memory) so a long job's
whole run stays in view in bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from corral.wire import corral_pb2 as pb

MAX_POINTS = 360
PRUNE_EVERY = 1000  # records between drops of series whose job left memory

Point = tuple[float, float, float]  # time, utilization %, memory MiB


@dataclass
class Series:
    """One GPU of one job: its points, oldest first."""

    points: list[Point] = field(default_factory=list)
    stride: int = 1  # samples per point (doubles each time the series is halved)
    _pending: list[Point] = field(default_factory=list)

    def add(self, time: float, util: float, mem: float) -> None:
        self._pending.append((time, util, mem))
        if len(self._pending) < self.stride:
            return
        self.points.append(_merge(self._pending))
        self._pending = []
        if len(self.points) > MAX_POINTS:
            pts = self.points
            self.points = [_merge(pts[i : i + 2]) for i in range(0, len(pts), 2)]
            self.stride *= 2


def _merge(pts: list[Point]) -> Point:
    if len(pts) == 1:
        return pts[0]
    return (pts[0][0], sum(p[1] for p in pts) / len(pts), max(p[2] for p in pts))


class GpuSamples:
    def __init__(self) -> None:
        # node -> (when its last heartbeat came, its GPUs then)
        self.latest: dict[str, tuple[float, list[pb.GpuStatus]]] = {}
        # job id -> (node, GPU index) -> series
        self.series: dict[int, dict[tuple[str, int], Series]] = {}
        self._records = 0

    def record(
        self,
        node: str,
        gpus: Iterable[pb.GpuStatus],
        holders: Mapping[int, Iterable[int]],
        now: float,
    ) -> None:
        """A heartbeat's GPUs of ``node``; ``holders``: GPU index -> the jobs on it."""
        got = list(gpus)
        self.latest[node] = (now, got)
        for g in got:
            for job_id in holders.get(g.index, ()):
                per_job = self.series.setdefault(job_id, {})
                series = per_job.get((node, g.index))
                if series is None:
                    series = per_job[(node, g.index)] = Series()
                series.add(now, g.util_pct, g.memory_used_mb)

    def prune(self, known: Callable[[int], bool]) -> None:
        """Drop the series of jobs no longer in memory (every PRUNE_EVERY calls)."""
        self._records += 1
        if self._records % PRUNE_EVERY:
            return
        for job_id in [j for j in self.series if not known(j)]:
            del self.series[job_id]

    def now(self, node: str, max_age: float, now: float) -> dict[int, pb.GpuStatus]:
        """``node``'s GPUs by index as last sampled, if that is at most ``max_age`` old."""
        when, gpus = self.latest.get(node, (0.0, []))
        if now - when > max_age:
            return {}
        return {g.index: g for g in gpus}

    def of_job(self, job_id: int) -> dict[tuple[str, int], Series]:
        return self.series.get(job_id, {})


def holders(node: str, jobs: Iterable[pb.Job]) -> dict[int, list[int]]:
    """GPU index on ``node`` -> the jobs allocated it (shards: several)."""
    out: dict[int, list[int]] = {}
    for job in jobs:
        for alloc in job.allocations:
            if alloc.node == node:
                for i in alloc.gpu_indices:
                    out.setdefault(i, []).append(job.job_id)
    return out
