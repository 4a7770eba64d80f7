"""What a site replay hands the scheduling core besides its queue: the settings and
partitions of one configuration, and the read-only views of the running jobs and the
reservations in force, each made the way ctld's snapshot makes it."""

from __future__ import annotations

from corral import hostlist
from corral.wire import corral_pb2 as pb
from ctld.model.victims import Victim
from ctld.sched import INFINITY, PartitionView, Placement, ReservationView, RunningView, Settings
from ctld.sim.history import History
from ctld.sim.site import Site


def settings_of(site: Site) -> Settings:
    """The scheduler's settings under the site's configuration; forecasts are not made
    (they change no start)."""
    sc = site.config.scheduler
    return Settings(
        backfill=sc.backfill,
        reserve_depth=sc.reserve_depth,
        forecast_depth=0,
        placement=sc.placement,
        predict=sc.predict,
        backfill_order=sc.backfill_order,
        max_job_test=sc.max_job_test,
        starve_after_s=sc.starvation_guard_s,
        qos_max_jobs_per_user=tuple(
            (q.name, q.max_jobs_per_user)
            for q in site.accounting.qos_table()
            if q.max_jobs_per_user
        ),
    )


def partitions_of(site: Site) -> tuple[PartitionView, ...]:
    return tuple(
        PartitionView(
            p.name, p.nodes, p.state, p.max_nodes, p.max_time_s, p.priority_tier, p.spare_nodes
        )
        for p in site.config.partitions
    )


def running_view(
    job: pb.Job, placements: tuple[Placement, ...], predicted_s: int, victim: Victim | None
) -> RunningView:
    """A running job as the core sees it: a preemption's victim is expected gone by its
    deadline and cannot be preempted again."""
    end = job.start_time + job.time_limit_s if job.time_limit_s >= 0 else INFINITY
    preemptable = not job.spec.allocation_only
    if victim is not None:
        end, preemptable = min(end, victim.deadline), False
    return RunningView(
        job_id=job.job_id,
        end_time=end,
        placements=placements,
        user=job.user,
        qos=job.qos,
        start_time=job.start_time,
        predicted_s=predicted_s,
        account=job.account,
        priority=job.priority,
        preemptable=preemptable,
    )


def reservation_views(history: History, now: float) -> tuple[ReservationView, ...]:
    """The reservations in force at ``now``: each as it was then (the log's version)."""
    return tuple(
        ReservationView(
            name=v.resv.name,
            start=v.resv.start_time,
            end=v.resv.end_time,
            nodes=tuple(hostlist.expand(v.resv.nodes)) if v.resv.nodes else (),
            users=tuple(v.resv.users),
            accounts=tuple(v.resv.accounts),
            flags=tuple(v.resv.flags),
        )
        for v in history.reservations
        if v.since <= now < v.until and v.resv.end_time > now
    )
