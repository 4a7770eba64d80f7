"""Fair-share usage: TRES-weighted seconds per (account, user), decayed with a half-life.

A finished job adds its whole usage at its end time; a running job counts what it has
used so far, so a long job weighs on its user while it runs. The ledger is rebuilt from
the store's finished jobs when ctld starts, so usage is as durable as accounting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from corral.config import PriorityConfig
from corral.wire import corral_pb2 as pb

Key = tuple[str, str]


def billing_rate(job: pb.Job, priority: PriorityConfig) -> float:
    """Usage per second of ``job``'s allocation (Slurm's TRES billing)."""
    return (
        job.num_cpus * priority.weight("cpu")
        + job.num_gpus * priority.weight("gpu")
        + job.mem_mb / 1024 * priority.weight("mem_gb")
    )


class UsageLedger:
    def __init__(
        self, priority: PriorityConfig, usage_factor: Callable[[str], float] = lambda qos: 1.0
    ) -> None:
        self.priority = priority
        # a QOS's UsageFactor, looked up when charged: sacctmgr may change it at any time
        self.usage_factor = usage_factor
        self.half_life = float(priority.decay_half_life_s)
        self._value: dict[Key, float] = {}
        self._as_of: dict[Key, float] = {}

    def set_priority(self, priority: PriorityConfig, now: float) -> None:
        """Charge by ``priority``'s TRES weights and decay with its half-life from ``now``
        on (a reconfigure): the usage so far is decayed to ``now`` first, so the new
        half-life does not reach back."""
        for key in self._value:
            self._value[key] = self._decayed(key, now)
            self._as_of[key] = now
        self.priority = priority
        self.half_life = float(priority.decay_half_life_s)

    def _decayed(self, key: Key, now: float) -> float:
        value = self._value.get(key, 0.0)
        if not value:
            return 0.0
        return value * math.pow(0.5, max(now - self._as_of[key], 0.0) / self.half_life)

    def add(self, key: Key, amount: float, at: float) -> None:
        """Add ``amount`` of usage that happened at ``at``."""
        if amount <= 0:
            return
        as_of = max(self._as_of.get(key, at), at)
        current = self._decayed(key, as_of)
        amount *= math.pow(0.5, (as_of - at) / self.half_life)
        self._value[key] = current + amount
        self._as_of[key] = as_of

    def add_finished(self, job: pb.Job) -> None:
        if job.start_time <= 0 or job.end_time <= job.start_time:
            return
        elapsed = job.end_time - job.start_time
        self.add((job.account, job.user), elapsed * self._rate(job), job.end_time)

    def snapshot(self, now: float, running: Iterable[pb.Job]) -> dict[Key, float]:
        """Usage of every association at ``now``, counting running jobs so far."""
        out = {key: self._decayed(key, now) for key in self._value}
        for job in running:
            if job.start_time > 0:
                key = (job.account, job.user)
                out[key] = out.get(key, 0.0) + max(now - job.start_time, 0.0) * self._rate(job)
        return out

    def _rate(self, job: pb.Job) -> float:
        return billing_rate(job, self.priority) * self.usage_factor(job.qos or "normal")
