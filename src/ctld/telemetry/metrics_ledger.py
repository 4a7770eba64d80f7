"""What the metrics count over time: told of every committed change (an observer of
``State``), so a counter never goes down and never forgets a job ctld purged.

Counters start at ctld's start (Prometheus takes a restart as a counter reset):
submits and ends by partition and state, wait and run times by partition
(histograms), and GPU-seconds by user and account. A running job's GPU-seconds are
added up to each scrape (``accrue``), so the counter moves while it runs and never
steps back when it ends.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js

# seconds; the last bucket (+Inf) is implicit
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
RUN_BUCKETS = (10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, +Inf last; not cumulative
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, count) pairs as Prometheus wants them, +Inf last."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else f"{bound:g}", float(running)))
        return out


class MetricsLedger:
    def __init__(self, start: float) -> None:
        self.start = start
        self.submitted: Counter[str] = Counter()  # partition
        self.ended: Counter[tuple[str, str]] = Counter()  # (partition, state)
        self.waits: dict[str, Histogram] = {}
        self.runs: dict[str, Histogram] = {}
        self.gpu_seconds: dict[tuple[str, str], float] = {}  # (user, account)
        # running jobs: GPU-seconds counted up to this time
        self.accounted: dict[int, float] = {}

    # ------------------------------------------------------------ the observer

    def __call__(self, job: pb.Job, events: Sequence[pb.JobEvent]) -> None:
        part = job.partition or (job.spec.partitions[0] if job.spec.partitions else "")
        for ev in events:
            if ev.event == "submitted":
                self.submitted[part] += 1
            elif ev.event == "started":
                wait = max(0.0, (job.start_time or ev.time) - job.submit_time)
                self.waits.setdefault(part, Histogram(WAIT_BUCKETS)).observe(wait)
                self.accounted[job.job_id] = job.start_time or ev.time
            elif ev.to_state in js.FINISHED or ev.event == "requeued":
                if ev.from_state in js.ON_NODE:
                    self._run_ended(job, part, ev)
                if ev.to_state in js.FINISHED:
                    self.ended[(part, js.state_name(ev.to_state))] += 1

    def _run_ended(self, job: pb.Job, part: str, ev: pb.JobEvent) -> None:
        end = ev.time
        if job.start_time:
            self.runs.setdefault(part, Histogram(RUN_BUCKETS)).observe(
                max(0.0, end - job.start_time)
            )
        since = self.accounted.pop(job.job_id, max(job.start_time, self.start))
        if job.num_gpus and end > since:
            key = (job.user, job.account)
            self.gpu_seconds[key] = self.gpu_seconds.get(key, 0.0) + job.num_gpus * (end - since)

    # ------------------------------------------------------------ at a scrape

    def accrue(self, running: Iterable[pb.Job], now: float) -> None:
        """Add running jobs' GPU-seconds up to ``now`` (a job running since before this
        ctld started counts from its start)."""
        for job in running:
            since = self.accounted.get(job.job_id, max(job.start_time, self.start))
            if job.num_gpus and now > since:
                key = (job.user, job.account)
                self.gpu_seconds[key] = self.gpu_seconds.get(key, 0.0) + job.num_gpus * (
                    now - since
                )
            self.accounted[job.job_id] = max(now, since)
