"""The scheduling loop: snapshot -> ``sched.schedule`` -> apply the plan -> launch.

Passes are woken by events and coalesced; a plan is applied only to the state it was
made from, and a job's RUNNING row is durable before its node hears of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from corral import hostlist
from corral.errors import CorralError
from corral.patterns import batch_output_paths
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.endings import Endings
from ctld.outbox import Dispatcher
from ctld.sched import INFINITY, Plan, Snapshot, schedule
from ctld.state import State
from ctld.store import Op

log = structlog.get_logger("ctld")

MIN_PASS_GAP_S = 0.005  # at most ~200 passes/s however many events arrive


class Scheduler:
    def __init__(
        self,
        state: State,
        endings: Endings,
        dispatcher: Dispatcher,
        snapshot: Callable[[], Snapshot],
    ) -> None:
        self.state = state
        self.endings = endings
        self.dispatcher = dispatcher
        self.snapshot = snapshot
        self.passes = 0
        self.last_pass_s = 0.0
        self.last_considered = 0
        self.starts_total = 0

    async def run(self) -> None:
        st = self.state
        interval = st.config.controller.sched_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(st.wake_event.wait(), timeout=interval)
            st.wake_event.clear()
            try:
                await self.schedule_pass()
            except Exception:  # a failed pass must not stop scheduling
                log.exception("scheduling pass failed")
            # a burst of events (submits, exits) then shares the next pass
            await asyncio.sleep(MIN_PASS_GAP_S)

    async def schedule_pass(self) -> None:
        self.passes += 1
        began = time.perf_counter()
        snap = self.snapshot()
        plan = schedule(snap)
        self.last_pass_s = time.perf_counter() - began
        self.last_considered = plan.considered
        await self.apply_plan(plan, pass_no=self.passes)

    def cancel_never_satisfied(self, jobs: list[pb.Job]) -> None:
        self.state.spawn(self._cancel_never_satisfied(jobs))

    async def _cancel_never_satisfied(self, jobs: list[pb.Job]) -> None:
        st = self.state
        now = st.clock()
        ops = []
        for job in jobs:
            if job.state != js.PENDING:
                continue
            js.transition(
                job,
                "cancelled",
                cause="sched:kill_invalid_depend",
                now=now,
                detail="dependency can never be satisfied",
            )
            job.end_time = now
            ops.append(st.save(job))
        if ops:
            await st.store.commit(*ops)

    async def apply_plan(self, plan: Plan, *, pass_no: int) -> None:
        st = self.state
        if plan.snapshot_version != st.version:
            log.info("stale plan dropped", plan_version=plan.snapshot_version, version=st.version)
            st.wake()
            return
        now = st.clock()
        for job_id, reason in plan.reasons.items():
            job = st.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            forecast = plan.forecasts.get(job_id)
            changed = job.reason != reason
            job.reason = reason
            if forecast is None:
                changed |= job.expected_start != 0 or bool(job.forecast_nodes)
                job.expected_start, job.forecast_nodes = 0, ""
                job.forecast_reserved = False
                del job.waits_for[:]
            elif (
                job.expected_start != forecast.start
                or list(job.waits_for) != list(forecast.waits_for)
                or job.forecast_reserved != forecast.reserved
            ):
                changed = True
                job.expected_start = forecast.start if forecast.start != INFINITY else 0
                job.forecast_nodes = hostlist.compress(list(forecast.nodes))
                job.forecast_reserved = forecast.reserved
                job.waits_for[:] = forecast.waits_for
            if changed:
                st.touch(job)
        ops: list[Op] = []
        launches: list[pb.Job] = []
        for start in plan.starts:
            job = st.jobs.get(start.job_id)
            if job is None or job.state != js.PENDING:
                continue
            for p in start.placements:
                st.nodes[p.node].allocate(job.job_id, p.cpus, p.mem_mb, list(p.gpu_indices))
            del job.allocations[:]
            for p in start.placements:
                job.allocations.add(
                    node=p.node, cpus=p.cpus, mem_mb=p.mem_mb, gpu_indices=list(p.gpu_indices)
                )
            job.partition = start.partition
            job.nodelist = hostlist.compress([p.node for p in start.placements])
            job.batch_host = start.placements[0].node
            job.stdout_path, job.stderr_path = batch_output_paths(
                job_id=job.job_id,
                job_name=job.spec.name,
                user=job.user,
                node=job.batch_host,
                work_dir=job.spec.work_dir,
                stdout_pattern=job.spec.stdout_pattern,
                stderr_pattern=job.spec.stderr_pattern,
                array_job_id=job.array_job_id,
                array_task_id=job.array_task_id if job.HasField("array_task_id") else None,
            )
            job.num_nodes = len(start.placements)
            job.num_cpus = sum(p.cpus for p in start.placements)
            job.mem_mb = sum(p.mem_mb for p in start.placements)
            job.num_gpus = sum(len(p.gpu_indices) for p in start.placements)
            job.start_time = now
            job.reason = "None"
            job.expected_start, job.forecast_nodes = 0, ""
            job.forecast_reserved = False
            del job.waits_for[:]
            js.transition(
                job,
                "started",
                cause=f"sched:pass={pass_no}",
                now=now,
                detail=f"nodes={job.nodelist}",
            )
            ops.append(st.save(job))
            launches.append(job)
        if not ops:
            return
        st.version += 1
        self.starts_total += len(launches)
        await st.store.commit(*ops)  # RUNNING is durable before any node hears of it
        for job in launches:
            if job.spec.allocation_only:
                continue  # salloc/srun hold it: nothing runs until they start steps
            st.launching.add(job.job_id)  # from now until the node has answered
            st.spawn(self._launch(job))

    async def _launch(self, job: pb.Job) -> None:
        st = self.state
        node = st.nodes[job.batch_host]
        request = pb.LaunchJobRequest(
            job=job,
            cluster=st.config.cluster_name,
            kill_wait_s=st.config.controller.kill_wait_s,
        )
        try:
            await self.dispatcher.launch(node, request)
            log.info("job launched", job_id=job.job_id, node=node.name)
        except CorralError as exc:
            if job.state != js.RUNNING:
                return
            log.warning(
                "launch failed, requeued", job_id=job.job_id, node=node.name, error=str(exc)
            )
            node.late = True  # nothing more goes there until it heartbeats again
            self.endings.requeue(job, cause=f"dispatch:{node.name} unreachable", detail=str(exc))
            await st.store.commit(st.save(job))
            st.wake()
        finally:
            st.launching.discard(job.job_id)
