"""A job requeued after a node failure takes its healthy nodes back first.

Its request names the nodes its run kept healthy (``JobRequest.reclaim``) and how long
they are its own (``reclaim_until``: ctld gives a heartbeat timeout from the requeue,
long enough for a healthy node that is only late to be heard again or declared DOWN).
Until then, in every pass:

- each of those nodes holds what the job asks of a node (the whole node for an
  ``--exclusive`` job) from now on, a hold that the job alone ignores: no other job,
  of any priority, starts there or is planned there;
- the job is tried before every other job, so that the partition's hot spare that
  completes it (``Placer.spares``) is its own too;
- a claimed node is never one of the partition's spares.

Slurm has no hot spares; this is the requeued job's claim on what it ran on, so that a
node failure costs a restart and not a queue wait. A job held, waiting for its
--begin time or for its own reservation makes no claim.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctld.sched.model import INFINITY, JobRequest, NodeView
from ctld.sched.profile import Hold
from ctld.sched.shape import job_shape


def owner(job_id: int) -> str:
    """The owner of a reclaiming job's holds (the job's candidates ignore them)."""
    return f"reclaim:{job_id}"


def reclaiming(
    pending: Iterable[JobRequest], now: float, claimed: frozenset[int] = frozenset()
) -> tuple[JobRequest, ...]:
    """The pending jobs whose claim holds now, in queue order (a preemptor with a claim
    of its own, ``claimed``, is planned on that one)."""
    return tuple(
        r
        for r in pending
        if r.reclaim
        and now < r.reclaim_until
        and not r.blocked_reason
        and not r.reservation
        and r.job_id not in claimed
    )


def first(
    pending: tuple[JobRequest, ...], reclaimers: tuple[JobRequest, ...]
) -> tuple[JobRequest, ...]:
    """The queue with the reclaiming jobs at its front (in their own order)."""
    if not reclaimers:
        return pending
    ids = {r.job_id for r in reclaimers}
    return (*reclaimers, *(r for r in pending if r.job_id not in ids))


def hold(req: JobRequest, view: NodeView, free_gpus: Iterable[int], now: float) -> Hold:
    """What ``req`` claims on node ``view``: what it asks of a node (its lowest free
    GPUs), or the whole node for an exclusive job, from now on."""
    if req.exclusive:
        every = view.gpu_indices if view.gpu_indices is not None else range(view.gpus_total)
        return Hold(
            now, INFINITY, view.cpus_total, view.mem_total_mb, frozenset(every), owner(req.job_id)
        )
    shape = job_shape(req)
    count = shape.gpus_per_node + (1 if shape.shards_per_node else 0)
    gpus = frozenset(sorted(free_gpus)[:count])
    return Hold(now, INFINITY, shape.cpus_per_node, shape.mem_per_node_mb, gpus, owner(req.job_id))
