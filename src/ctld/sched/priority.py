"""Multifactor priority, as Slurm's priority/multifactor plugin computes it.

    priority = w_age * age + w_fairshare * fairshare + w_jobsize * size
             + w_partition * partition + w_qos * qos - nice

Every factor is a number in [0, 1]: age saturates at ``max_age_s``; size is the job's
share of the cluster's CPUs (or its complement with ``favor_small``); partition is the
partition's PriorityTier over the highest tier; qos the QoS priority over the highest
QoS priority; fairshare comes from ``fairshare.py``. An operator-set priority replaces
the sum.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    age: int = 1000
    fairshare: int = 10000
    job_size: int = 1000
    partition: int = 1000
    qos: int = 1000
    max_age_s: int = 7 * 24 * 3600
    favor_small: bool = False


@dataclass(frozen=True)
class Factors:
    """One job's factors (each in [0, 1]) and the priority they add up to."""

    age: float
    fairshare: float
    job_size: float
    partition: float
    qos: float
    nice: int
    priority: int

    def weighted(self, weights: Weights) -> dict[str, int]:
        """What each factor contributes, as ``sprio`` prints it."""
        return {
            "AGE": round(weights.age * self.age),
            "FAIRSHARE": round(weights.fairshare * self.fairshare),
            "JOBSIZE": round(weights.job_size * self.job_size),
            "PARTITION": round(weights.partition * self.partition),
            "QOS": round(weights.qos * self.qos),
            "NICE": self.nice,
        }


def factors(
    weights: Weights,
    *,
    age_s: float,
    fairshare: float,
    cpus: int,
    cluster_cpus: int,
    partition_tier: int,
    max_partition_tier: int,
    qos_priority: int,
    max_qos_priority: int,
    nice: int,
) -> Factors:
    age = min(max(age_s, 0.0) / weights.max_age_s, 1.0) if weights.max_age_s > 0 else 1.0
    size = min(cpus / cluster_cpus, 1.0) if cluster_cpus > 0 else 0.0
    if weights.favor_small:
        size = 1.0 - size
    part = partition_tier / max_partition_tier if max_partition_tier > 0 else 0.0
    qos = qos_priority / max_qos_priority if max_qos_priority > 0 else 0.0
    fs = min(max(fairshare, 0.0), 1.0)
    total = (
        weights.age * age
        + weights.fairshare * fs
        + weights.job_size * size
        + weights.partition * part
        + weights.qos * qos
        - nice
    )
    return Factors(age, fs, size, part, qos, nice, max(int(total), 0))
