"""The scheduler's input: a frozen picture of nodes, partitions, pending and running jobs.

Building it changes nothing (``explain`` builds one too). Every pending job is in it:
one ctld holds back (a hold, a --begin time, a dependency, its array's %N throttle)
carries that reason in ``JobRequest.blocked_reason`` and the core only passes it on,
so every pending job's reason comes back in the plan and is written by its applier.
The one thing kept between builds is a memo of each job's request (a pure function of
the job, rebuilt when its priority changes or ctld drops it on an update) and of the
run time predicted for it then (what a running job's view carries).
"""

from __future__ import annotations

import dataclasses

from corral.jobsyntax import parse_array
from corral.reasons import Reason
from corral.wire import corral_pb2 as pb
from ctld import deps
from ctld import jobstate as js
from ctld.sched import (
    INFINITY,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Settings,
    Snapshot,
)
from ctld.state import State
from ctld.validate import request_from_spec


def settings_from(state: State) -> Settings:
    config = state.config
    return Settings(
        backfill=config.scheduler.backfill,
        reserve_depth=config.scheduler.reserve_depth,
        forecast_depth=config.scheduler.forecast_depth,
        placement=config.scheduler.placement,
        predict=config.scheduler.predict,
        backfill_order=config.scheduler.backfill_order,
        qos_max_jobs_per_user=tuple(
            (q.name, q.max_jobs_per_user) for q in config.qos if q.max_jobs_per_user
        ),
    )


class SnapshotBuilder:
    def __init__(self, state: State, settings: Settings) -> None:
        self.state = state
        self.settings = settings
        # held-back jobs' bare requests, by job: (its revision, the reason, the request);
        # a queue of thousands of held jobs then costs a lookup each per pass
        self._blocked: dict[int, tuple[int, str, JobRequest]] = {}

    def build(self) -> Snapshot:
        st = self.state
        nodes = tuple(
            NodeView(
                name=n.name,
                cpus_total=n.resources.cpus,
                mem_total_mb=n.resources.memory_mb,
                gpus_total=len(n.resources.gpus),
                cpus_free=max(0, n.resources.cpus - n.alloc_cpus),
                mem_free_mb=max(0, n.resources.memory_mb - n.alloc_mem_mb),
                gpus_free=tuple(i for i in n.gpu_indices if i not in n.alloc_gpus),
                gpu_type=n.gpu_type,
                schedulable=n.schedulable,
                idle=not n.job_ids,
                gpu_indices=n.gpu_indices,
            )
            for n in st.nodes.values()
        )
        parts = tuple(
            PartitionView(p.name, p.nodes, p.state, p.max_nodes, p.max_time_s, p.priority_tier)
            for p in st.config.partitions
        )
        now = st.clock()
        on_node = [j for j in st.jobs.values() if j.state in js.ON_NODE]
        pending: list[JobRequest] = []
        # tasks an array may still start under its %N throttle, counted down this pass
        array_room: dict[int, int] = {}
        for j in on_node:
            if j.array_job_id:
                array_room[j.array_job_id] = array_room.get(j.array_job_id, 0) + 1
        throttles: dict[int, int] = {}
        for job_id in st.pending:
            job = st.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            blocked = self._blocked_reason(job, now)
            if not blocked and job.array_job_id and "%" in job.spec.array:
                if job.array_job_id not in throttles:
                    limit = parse_array(job.spec.array).max_running
                    throttles[job.array_job_id] = limit - array_room.get(job.array_job_id, 0)
                if throttles[job.array_job_id] <= 0:
                    blocked = Reason.JOB_ARRAY_TASK_LIMIT
                else:
                    throttles[job.array_job_id] -= 1
            if blocked:
                pending.append(self._blocked_request(job, blocked))
                continue
            req = st.requests.get(job_id)
            if req is None or req.priority != job.priority:
                req = self.request_for(job)
                st.requests[job_id] = req
                st.predicted[job_id] = req.predicted_s
            pending.append(req)
        pending.sort(key=lambda r: (-r.priority, r.submit_time, r.job_id))
        book = st.preemptions
        running = []
        for j in on_node:
            victim = book.victim(j)
            end = j.start_time + j.time_limit_s if j.time_limit_s >= 0 else INFINITY
            running.append(
                RunningView(
                    job_id=j.job_id,
                    # one being preempted is gone by its deadline (grace time + KillWait)
                    end_time=min(end, victim.deadline) if victim is not None else end,
                    placements=tuple(
                        Placement(a.node, a.cpus, a.mem_mb, tuple(a.gpu_indices))
                        for a in j.allocations
                    ),
                    user=j.user,
                    qos=j.qos,
                    start_time=j.start_time,
                    predicted_s=st.predicted.get(j.job_id, 0),
                    priority=j.priority,
                    preemptable=(
                        victim is None and j.state == js.RUNNING and not j.spec.allocation_only
                    ),
                )
            )
        return Snapshot(
            version=st.version,
            now=now,
            nodes=nodes,
            partitions=parts,
            pending=tuple(pending),
            running=tuple(running),
            reservations=st.reservations.views(),
            settings=self.settings,
            qos=st.qos.views(),
            claims=book.claim_views(),
        )

    def request_for(self, job: pb.Job) -> JobRequest:
        """What the core sees of a pending job (sbatch --test-only asks for one too)."""
        req = request_from_spec(job.spec, job.job_id, job.spec.partitions, job.time_limit_s)
        return dataclasses.replace(
            req,
            priority=job.priority,
            user=job.user,
            account=job.account,
            qos=job.qos,
            reservation=job.spec.reservation,
            submit_time=job.submit_time,
            predicted_s=self.state.predictor.predict(job.user, job.time_limit_s),
        )

    def _blocked_request(self, job: pb.Job, reason: str) -> JobRequest:
        revision = self.state.revisions.get(job.job_id, 0)
        memo = self._blocked.get(job.job_id)
        if memo is not None and memo[0] == revision and memo[1] == reason:
            return memo[2]
        if len(self._blocked) > 2 * len(self.state.pending) + 1024:  # forget departed jobs
            self._blocked = {k: v for k, v in self._blocked.items() if k in self.state.pending}
        req = JobRequest(
            job_id=job.job_id,
            partitions=tuple(job.spec.partitions),
            priority=job.priority,
            submit_time=job.submit_time,
            blocked_reason=reason,
        )
        self._blocked[job.job_id] = (revision, reason, req)
        return req

    def _blocked_reason(self, job: pb.Job, now: float) -> str:
        """Why ctld holds a pending job back from this pass ("" if it does not)."""
        if job.hold:
            return Reason.JOB_HELD_ADMIN if job.hold == pb.HOLD_ADMIN else Reason.JOB_HELD_USER
        if job.eligible_time > now:
            return Reason.BEGIN_TIME
        if job.spec.dependency:
            state = deps.evaluate(
                job, self.state.lookup, now, self._singleton_held, self._array_tasks
            )
            if state is deps.DepState.WAITING:
                return Reason.DEPENDENCY
            if state is deps.DepState.NEVER:
                return Reason.DEPENDENCY_NEVER_SATISFIED
        return ""

    def _array_tasks(self, array_id: int) -> list[pb.Job]:
        jobs = self.state.jobs
        first = jobs.get(array_id)
        if first is None or not first.array_job_id:
            return []
        return [j for j in jobs.values() if j.array_job_id == array_id]

    def _singleton_held(self, job: pb.Job) -> bool:
        return any(
            o.job_id < job.job_id
            and o.user == job.user
            and o.spec.name == job.spec.name
            and o.state in js.ACTIVE
            for o in self.state.jobs.values()
        )
