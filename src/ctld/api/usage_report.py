"""sreport's numbers: the TRES-seconds each (account, user) used, per time bucket.

Computed from the stored job records, never from the fair-share ledger (which decays):
each run of a job counts its own time (a requeued job's earlier runs are job_runs rows),
a running job counts up to now, and each run is clipped to each bucket it overlaps.
The commands do the rest (the account tree's sums, units, layout); nothing here writes.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence

from corral.errors import InvalidRequest
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord
from ctld.sched.fairshare import AccountShare

# The TRES a report can name; billing is the CPU count, as sacct's billing= says.
TRES = ("cpu", "gres/gpu", "mem", "node", "billing")


def check_bounds(bounds: Sequence[float]) -> None:
    if len(bounds) < 2:
        raise InvalidRequest("a usage report needs a start and an end")
    if not all(math.isfinite(b) for b in bounds) or any(
        b <= a for a, b in itertools.pairwise(bounds)
    ):
        raise InvalidRequest("a usage report's bucket bounds must be ascending")


def _counts(job: pb.Job) -> dict[str, float]:
    return {
        "cpu": job.num_cpus,
        "gres/gpu": job.num_gpus,
        "mem": float(job.mem_mb),
        "node": job.num_nodes,
        "billing": job.num_cpus,
    }


def span(job: pb.Job, now: float) -> tuple[float, float] | None:
    """When this run held its allocation; None for a run that never started."""
    if job.start_time <= 0 or job.state == js.PENDING:
        return None
    end = job.end_time if job.end_time > 0 else now
    return job.start_time, max(end, job.start_time)


def usage_records(
    runs: Iterable[pb.Job], bounds: Sequence[float], now: float
) -> list[pb.UsageRecord]:
    """One record per (account, user, bucket) that used anything."""
    sums: dict[tuple[str, str, int], dict[str, float]] = {}
    last = len(bounds) - 1
    for job in runs:
        when = span(job, now)
        if when is None:
            continue
        start, end = when
        counts = _counts(job)
        i = max(bisect.bisect_right(bounds, start) - 1, 0)
        while i < last and bounds[i] < end:
            overlap = min(end, bounds[i + 1]) - max(start, bounds[i])
            if overlap > 0:
                acc = sums.setdefault((job.account or "root", job.user, i), dict.fromkeys(TRES, 0))
                for name, count in counts.items():
                    acc[name] += count * overlap
            i += 1
    return [
        pb.UsageRecord(account=a, user=u, bucket=i, tres_s=v)
        for (a, u, i), v in sorted(sums.items())
    ]


def capacity(nodes: Iterable[NodeRecord]) -> dict[str, float]:
    """The cluster's TRES counts now (corral keeps no history of node sizes)."""
    out = dict.fromkeys(TRES, 0.0)
    for node in nodes:
        res = node.resources
        out["cpu"] += res.cpus
        out["gres/gpu"] += len(res.gpus)
        out["mem"] += res.memory_mb
        out["node"] += 1
    out["billing"] = out["cpu"]
    return out


def account_tree(tree: Iterable[AccountShare]) -> list[pb.AccountParent]:
    return [pb.AccountParent(account=a.name, parent=a.parent) for a in tree]
