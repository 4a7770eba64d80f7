"""The scheduler's input: a frozen picture of nodes, partitions, pending and running jobs.

Building it changes nothing (``explain`` builds one too). Every pending job is in it:
one ctld holds back (a hold, a --begin time, a dependency, its array's %N throttle)
carries that reason in ``JobRequest.blocked_reason`` and the core only passes it on,
so every pending job's reason comes back in the plan and is written by its applier.
What is kept between builds are memos, each checked against the job's revision
(``State.touch``: bumped by every change to the job), so a pass over a deep queue
reads each unchanged job once: each job's request (a pure function of the job, rebuilt
when its priority changes or ctld drops it on an update) and the run time predicted
for it then (what a running job's view carries); which pending jobs need nothing read
again (no --begin still ahead, no dependency, no array throttle); the queue in
priority order, kept when only new jobs came (they are inserted); running jobs' views.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable

from corral.jobspec import array_throttle
from corral.wire import corral_pb2 as pb
from ctld.core import pending
from ctld.core.state import State
from ctld.model import deps
from ctld.model import jobstate as js
from ctld.model.validate import node_lists, request_from_spec
from ctld.model.victims import Preemptions
from ctld.ops.spares import reclaim, spares_ok
from ctld.planning.node_views import NodeViews
from ctld.sched import (
    INFINITY,
    JobRequest,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
)
from ctld.sched.frag import pending_demands
from ctld.sched.model import Demand
from ctld.sched.quick import priority_order, quick_queue


def settings_from(state: State) -> Settings:
    config = state.config
    return Settings(
        backfill=config.scheduler.backfill,
        reserve_depth=config.scheduler.reserve_depth,
        forecast_depth=config.scheduler.forecast_depth,
        stack_forecasts=config.scheduler.stack_forecasts,
        placement=config.scheduler.placement,
        predict=config.scheduler.predict,
        backfill_order=config.scheduler.backfill_order,
        max_job_test=config.scheduler.max_job_test,
        starve_after_s=config.scheduler.starvation_guard_s,
        qos_max_jobs_per_user=tuple(
            (q.name, q.max_jobs_per_user) for q in config.qos if q.max_jobs_per_user
        ),
    )


def _with_qos(settings: Settings, state: State) -> Settings:
    """``settings`` with the QOS limits of the accounting database as it is now."""
    return dataclasses.replace(
        settings,
        qos_max_jobs_per_user=tuple(
            (q.name, q.max_jobs_per_user) for q in state.config.qos if q.max_jobs_per_user
        ),
    )


class SnapshotBuilder:
    def __init__(self, state: State, settings: Settings) -> None:
        self.state = state
        self.settings = settings
        # held-back jobs' bare requests, by job: (its revision, the reason, the request);
        # a queue of thousands of held jobs then costs a lookup each per pass
        self._blocked: dict[int, tuple[int, str, JobRequest]] = {}
        # pending jobs whose request depends on nothing but the job: (revision, request)
        self._settled: dict[int, tuple[int, JobRequest]] = {}
        # the last build's requests in queue order, and the same in priority order
        self._queue: list[JobRequest] = []
        self._ordered: list[JobRequest] = []
        # running jobs' views: (revision, prediction, view)
        self._running: dict[int, tuple[int, int, RunningView]] = {}
        # every node's view, made again for the nodes that changed (node_views.py)
        self.node_views = NodeViews()
        self._accounting_version = state.acct.version
        # the earliest --begin still ahead in the last build (a start at submit must
        # not take what such a job may have by then), and the queue's demand there
        self.next_eligible = INFINITY
        self.demands: tuple[Demand, ...] = ()
        # whether a pending job waits on other jobs (a dependency, its array's %N):
        # an end may then let it start, which only a pass sees
        self.watching = False
        # what the pending job being read is judged against (``_request``)
        self._now = 0.0
        self._array_room: dict[int, int] = {}
        self._throttles: dict[int, int] = {}
        self._checks = (self._dependency, self._throttled)  # bound once, not per job

    def build(self) -> Snapshot:
        st = self.state
        self._refresh_settings()
        now = st.clock()
        on_node, self._array_room = self._on_node()
        self._now, self._throttles = now, {}
        pending: list[JobRequest] = []
        revisions = st.index.revisions
        settled = self._settled
        next_eligible = INFINITY
        watching = False
        for job_id in st.index.pending:
            memo = settled.get(job_id)
            if memo is not None and memo[0] == revisions.get(job_id, 0):
                pending.append(memo[1])
                continue
            job = st.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            req = self._request(job)
            pending.append(req)
            # what a later pass must read again: time (--begin), other jobs (a
            # dependency, the array's running tasks); all else moves the revision
            throttled = bool(job.array_job_id) and array_throttle(job.spec) is not None
            if job.eligible_time <= now and not job.spec.dependency and not throttled:
                settled[job_id] = (revisions.get(job_id, 0), req)
            else:
                if now < job.eligible_time < next_eligible and not job.hold:
                    next_eligible = job.eligible_time
                watching |= bool(job.spec.dependency) or throttled
        self.next_eligible = next_eligible
        self.watching = watching
        if len(settled) > 2 * len(st.index.pending) + 1024:  # forget departed jobs
            self._settled = {k: v for k, v in settled.items() if k in st.index.pending}
        snap = self._snapshot(now, on_node, tuple(self._in_priority_order(pending)))
        # fragmentation-aware placement weighs the queue's shapes: kept for the
        # starts at submit, whose short queue does not show them
        self.demands = pending_demands(snap)
        return dataclasses.replace(snap, demands=self.demands) if self.demands else snap

    def empty_queue(self) -> None:
        """What ``build`` leaves behind for a queue with no pending job, without building
        (the scheduler's pass skips the snapshot then: scheduling.py)."""
        self.next_eligible = INFINITY
        self.watching = False
        self.demands = ()
        self._queue, self._ordered = [], []

    def build_quick(self, job_ids: Iterable[int], reserved: Iterable[int]) -> Snapshot:
        """The cluster as it is now with only ``job_ids`` (new jobs) and ``reserved``
        (the last plan's reserved jobs, and any waiting jobs to weigh) pending, those
        of them still pending and not held back: the input of a start at submit
        (sched/quick.py). Reads no other pending job."""
        st = self.state
        self._refresh_settings()
        now = st.clock()
        on_node, self._array_room = self._on_node()
        self._now, self._throttles = now, {}
        reqs: list[JobRequest] = []
        for job_id in dict.fromkeys([*reserved, *job_ids]):
            job = st.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            req = self._request(job)
            if not req.blocked_reason:
                reqs.append(req)
        return self._snapshot(now, on_node, quick_queue(reqs, ()), self.demands)

    def _refresh_settings(self) -> None:
        st = self.state
        if st.acct.version != self._accounting_version:  # sacctmgr changed a QOS
            self._accounting_version = st.acct.version
            self.settings = _with_qos(self.settings, st)

    def _on_node(self) -> tuple[list[pb.Job], dict[int, int]]:
        """The jobs holding resources, and how many tasks of each array run (for the
        %N throttle: what it may still start, counted down by ``_request``)."""
        on_node = self.state.on_node()
        array_room: dict[int, int] = {}
        for j in on_node:
            if j.array_job_id:
                array_room[j.array_job_id] = array_room.get(j.array_job_id, 0) + 1
        return on_node, array_room

    def _request(self, job: pb.Job) -> JobRequest:
        """What the core sees of pending ``job`` now, in the build under way (a held-back
        job's carries why: ``pending.blocked_reason``, the one place ctld decides its
        reasons)."""
        st = self.state
        blocked = pending.blocked_reason(job, self._now, *self._checks)
        if blocked:
            return self._blocked_request(job, blocked)
        known = st.index.requests.get(job.job_id)
        if known is None:
            known = self.request_for(job)
            st.index.requests[job.job_id] = known
            st.runs.predicted[job.job_id] = known.predicted_s
        elif known.priority != job.priority:
            # the recalculation moved its priority, nothing else (ctld drops
            # the request of a job whose spec changes)
            known = st.index.requests[job.job_id] = known.with_priority(job.priority)
        return known

    def _snapshot(
        self,
        now: float,
        on_node: list[pb.Job],
        pending: tuple[JobRequest, ...],
        demands: tuple[Demand, ...] = (),
    ) -> Snapshot:
        st = self.state
        nodes = self.node_views.build(st.nodes, st.config, now)
        parts = tuple(
            PartitionView(
                p.name,
                p.nodes,
                p.state,
                p.max_nodes,
                p.max_time_s,
                p.priority_tier,
                p.spare_nodes,
            )
            for p in st.config.partitions
        )
        book = st.preemptions
        running = tuple(self._preempting(self._running_view(j), book) for j in on_node)
        if len(self._running) > 2 * len(on_node) + 1024:
            live = {j.job_id for j in on_node}
            self._running = {k: v for k, v in self._running.items() if k in live}
        return Snapshot(
            version=st.versions.version,
            now=now,
            nodes=nodes,
            partitions=parts,
            pending=pending,
            running=running,
            reservations=st.reservations.views(),
            settings=self.settings,
            demands=demands,
            limits=st.acct.limits,
            qos=st.acct.qos.views(),
            claims=book.claim_views(),
        )

    def _in_priority_order(self, queue: list[JobRequest]) -> list[JobRequest]:
        """``queue`` highest priority first. The last order is reused when the queue is
        the last one less a few jobs (started, cancelled) plus a few new at its end
        (submitted), the usual step between two passes; requests never change, so
        the kept ones keep their order and the new ones are inserted."""
        last, few = self._queue, 64
        self._queue = queue
        if abs(len(queue) - len(last)) <= 2 * few:
            gone: set[int] = set()
            i = 0
            for req in last:
                if i < len(queue) and queue[i] is req:
                    i += 1
                else:
                    gone.add(id(req))
                    if len(gone) > few:
                        break
            added = queue[i:]
            if len(gone) <= few and len(added) <= few:
                if gone:
                    ordered = [r for r in self._ordered if id(r) not in gone]
                else:
                    ordered = list(self._ordered) if added else self._ordered
                for req in added:
                    bisect.insort(ordered, req, key=priority_order)
                self._ordered = ordered
                return ordered
        self._ordered = sorted(queue, key=priority_order)
        return self._ordered

    def _running_view(self, j: pb.Job) -> RunningView:
        revision = self.state.index.revisions.get(j.job_id, 0)
        predicted = self.state.runs.predicted.get(j.job_id, 0)
        memo = self._running.get(j.job_id)
        if memo is not None and memo[0] == revision and memo[1] == predicted:
            return memo[2]
        view = RunningView(
            job_id=j.job_id,
            end_time=j.start_time + j.time_limit_s if j.time_limit_s >= 0 else INFINITY,
            placements=tuple(
                Placement(a.node, a.cpus, a.mem_mb, tuple(a.gpu_indices), a.shards)
                for a in j.allocations
            ),
            user=j.user,
            qos=j.qos,
            start_time=j.start_time,
            predicted_s=predicted,
            account=j.account,
            priority=j.priority,
            preemptable=j.state == js.RUNNING and not j.spec.allocation_only,
        )
        self._running[j.job_id] = (revision, predicted, view)
        return view

    def _preempting(self, view: RunningView, book: Preemptions) -> RunningView:
        """A job being preempted: no one's victim again, gone by its deadline (grace
        time + KillWait)."""
        if not book.victims:
            return view
        victim = book.victims.get(view.job_id)
        job = self.state.jobs.get(view.job_id)
        if victim is None or job is None or book.victim(job) is None:
            return view
        end = min(view.end_time, victim.deadline)
        return dataclasses.replace(view, end_time=end, preemptable=False)

    def request_for(self, job: pb.Job) -> JobRequest:
        """What the core sees of a pending job (sbatch --test-only asks for one too),
        built once from the job's typed spec; the queue index keeps it (``State.requests``)
        until the job changes."""
        spec = job.spec
        nodelist, exclude = node_lists(spec)
        reclaimed, until = reclaim(job, self.state.config.heartbeat.timeout_s)
        return request_from_spec(
            spec,
            job.job_id,
            spec.partitions,
            job.time_limit_s,
            nodelist=nodelist,
            exclude=exclude + self._avoided(job, nodelist, exclude),
            priority=job.priority,
            user=job.user,
            account=job.account,
            qos=job.qos,
            submit_time=job.submit_time,
            eligible_time=max(job.eligible_time, job.submit_time),
            predicted_s=self.state.runs.predictor.predict(job.user, job.time_limit_s),
            # an elastic job's healthy nodes, or those a requeued job claims back, first
            prefer=tuple(job.previous_nodes) if spec.elastic else reclaimed,
            spares_ok=spares_ok(job),
            reclaim=reclaimed,
            reclaim_until=until,
        )

    def _avoided(
        self, job: pb.Job, nodelist: tuple[str, ...], exclude: tuple[str, ...]
    ) -> tuple[str, ...]:
        """The nodes an earlier run of this job failed on (node down, stall): a requeued
        job is placed away from them, as long as every partition it may run in keeps
        enough other nodes; otherwise they are not held against it (it would wait for
        ever on a small cluster)."""
        failed = tuple(n for n in job.failed_nodes if n not in exclude and n not in nodelist)
        if not failed:
            return ()
        shunned = set(exclude).union(failed)
        needed = max(job.spec.nodes_min, len(nodelist), 1)
        for part in self.state.config.partitions:
            if part.name in job.spec.partitions and (
                sum(n not in shunned for n in part.nodes) < needed
            ):
                return ()
        return failed

    def _blocked_request(self, job: pb.Job, reason: str) -> JobRequest:
        revision = self.state.index.revisions.get(job.job_id, 0)
        memo = self._blocked.get(job.job_id)
        if memo is not None and memo[0] == revision and memo[1] == reason:
            return memo[2]
        if len(self._blocked) > 2 * len(self.state.index.pending) + 1024:  # forget departed jobs
            self._blocked = {
                k: v for k, v in self._blocked.items() if k in self.state.index.pending
            }
        req = JobRequest(
            job_id=job.job_id,
            partitions=tuple(job.spec.partitions),
            priority=job.priority,
            submit_time=job.submit_time,
            blocked_reason=reason,
        )
        self._blocked[job.job_id] = (revision, reason, req)
        return req

    def _throttled(self, job: pb.Job) -> bool:
        """``job``'s array runs as many tasks as its %N lets it (if not, one more is
        counted: the throttle is counted down over the queue in order)."""
        limit = array_throttle(job.spec) if job.array_job_id else None
        if limit is None:
            return False
        throttles = self._throttles
        if job.array_job_id not in throttles:
            throttles[job.array_job_id] = limit - self._array_room.get(job.array_job_id, 0)
        if throttles[job.array_job_id] <= 0:
            return True
        throttles[job.array_job_id] -= 1
        return False

    def _dependency(self, job: pb.Job) -> deps.DepState:
        """The verdict on the jobs ``job``'s --dependency names."""
        return deps.evaluate(
            job, self.state.lookup, self._now, self._singleton_held, self._array_tasks
        )

    def _array_tasks(self, array_id: int) -> list[pb.Job]:
        first = self.state.jobs.get(array_id)
        if first is None or not first.array_job_id:
            return []
        return self.state.array(array_id)

    def _singleton_held(self, job: pb.Job) -> bool:
        jobs = self.state.jobs
        return any(
            (o := jobs.get(i)) is not None
            and o.job_id < job.job_id
            and o.user == job.user
            and o.spec.name == job.spec.name
            and o.state in js.ACTIVE
            for i in self.state.index.active_ids
        )
