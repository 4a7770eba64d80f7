"""The scheduling loop: snapshot -> ``sched.schedule`` -> apply the plan -> launch.

Passes are woken by events and coalesced. The snapshot only reads; what a pass
writes is written here, by the applier: recalculated priorities (before the
snapshot), every pending job's reason and forecast, the starts, and the cancels of
jobs whose dependency can never be satisfied (``kill_invalid_depend``). A plan is
applied only to the state it was made from, and a job's RUNNING row is durable before
its node hears of it.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

import structlog

from corral import hostlist
from corral.errors import CorralError, StoreUnavailable
from corral.patterns import batch_output_paths
from corral.reasons import Reason
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld import pending
from ctld.commit import Change
from ctld.endings import Endings
from ctld.outbox import Dispatcher
from ctld.preemption import Preempter
from ctld.priorities import apply_factors
from ctld.sched import INFINITY, Placement, Plan, Snapshot, schedule
from ctld.state import State

log = structlog.get_logger("ctld")

MIN_PASS_GAP_S = 0.005  # at most ~200 passes/s however many events arrive
PASS_GAP_RATIO = 0.5  # the scheduler takes at most 2/3 of the loop however busy
RECALC_SLICE = 10_000  # pending jobs whose priorities one pass recalculates


class Scheduler:
    def __init__(
        self,
        state: State,
        endings: Endings,
        dispatcher: Dispatcher,
        snapshot: Callable[[], Snapshot],
        preempter: Preempter,
    ) -> None:
        self.state = state
        self.endings = endings
        self.preempter = preempter
        self.dispatcher = dispatcher
        self.snapshot = snapshot
        self.passes = 0
        self.last_pass_s = 0.0
        self.last_considered = 0
        self.starts_total = 0
        self.stale_plans = 0  # plans (or starts) refused because the state had moved
        self._recalc: list[int] = []  # pending jobs whose priority recalculation is due

    async def run(self) -> None:
        st = self.state
        interval = st.config.controller.sched_interval_s
        while True:
            # a preempted job's grace time ends on time, not at the next periodic pass
            grace_end = st.preemptions.next_grace_end()
            wait = interval if grace_end is None else min(interval, grace_end - st.clock())
            await self._woken_or(max(wait, MIN_PASS_GAP_S))
            st.wake_event.clear()
            try:
                await self.schedule_pass()
            except Exception:  # a failed pass must not stop scheduling
                log.exception("scheduling pass failed")
            # a burst of events (submits, exits) then shares the next pass; and a long
            # pass (a deep queue) leaves the loop to RPCs for half its length before the
            # next: otherwise back-to-back passes starve heartbeats and registrations
            # (at 50k pending on 1,000 nodes, one node re-registered per pass)
            await st.clock.sleep(max(MIN_PASS_GAP_S, self.last_pass_s * PASS_GAP_RATIO))

    async def _woken_or(self, seconds: float) -> None:
        """Until something asks for a pass, or ``seconds`` on the clock have gone by."""
        st = self.state
        if st.wake_event.is_set():
            return
        woken = asyncio.ensure_future(st.wake_event.wait())
        slept = asyncio.ensure_future(st.clock.sleep(seconds))
        try:
            await asyncio.wait((woken, slept), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            slept.cancel()

    async def schedule_pass(self) -> None:
        if not self.state.store.available:  # nothing starts that cannot be made durable first
            return
        self.passes += 1
        began = time.perf_counter()
        # the cyclic collector paused for the pass: it allocates much and frees it all
        # by reference counting, and a full collection of a deep queue's heap in the
        # middle of it cost as much as the rest (half the core's time at 50k pending);
        # whatever cycles a pass leaves are collected after it
        await self.preempter.expire()
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.refresh_priorities()
            self.state.preemptions.prune(self.state.jobs)
            snap = self.snapshot()
            plan = schedule(snap)
        finally:
            if collecting:
                gc.enable()
        self.last_pass_s = time.perf_counter() - began
        # jobs ctld held back are in the snapshot only to carry their reason
        self.last_considered = plan.considered - sum(1 for r in snap.pending if r.blocked_reason)
        await self.apply_plan(plan, pass_no=self.passes)

    def refresh_priorities(self) -> None:
        """Fair-share and age move with time: recalculate now and then, before a snapshot.

        A deep queue is recalculated in slices of ``RECALC_SLICE`` jobs, one per pass,
        so no pass holds the loop for the whole walk (at 50k pending, 0.7 s of CPU);
        each slice uses the time of its own pass."""
        st = self.state
        now = st.clock()
        if not self._recalc:
            if not st.priorities.recalc_due(now):
                return
            st.priorities.cluster_cpus = sum(n.resources.cpus for n in st.nodes.values())
            st.priorities.refresh(now, [j for j in st.jobs.values() if j.state in js.ON_NODE])
            self._recalc = list(st.pending)
            self._recalc.reverse()  # popped from the end: queue order
            # forget the predictions of jobs that left without running
            active = set(st.pending)
            active.update(j.job_id for j in st.jobs.values() if j.state in js.ON_NODE)
            for gone in [k for k in st.predicted if k not in active]:
                del st.predicted[gone]
        todo = self._recalc
        for _ in range(min(RECALC_SLICE, len(todo))):
            job = st.jobs.get(todo.pop())
            if job is None or job.state != js.PENDING or job.hold:
                continue
            if apply_factors(job, st.priorities.factors(job, now)):
                st.touch(job)
        if todo:
            st.wake()  # the rest in the next pass, not at the next periodic one

    async def _cancel_never_satisfied(self, jobs: list[pb.Job]) -> None:
        st = self.state
        now = st.clock()
        async with Change(st) as ch:
            for job in jobs:
                if job.state != js.PENDING:
                    continue
                ch.transition(
                    job,
                    "cancelled",
                    cause="sched:kill_invalid_depend",
                    now=now,
                    detail="dependency can never be satisfied",
                )
                job.end_time = now

    async def apply_plan(self, plan: Plan, *, pass_no: int) -> bool:
        """Apply ``plan`` if it is still true; False if it was refused as stale.

        A plan is a function of its snapshot: once anything it read has changed (the
        version moved), it is refused whole and a new pass is asked for. Each start is
        checked again as well (the job still pending, its placements still free on
        schedulable nodes), so that no plan, however made, can oversubscribe a node.
        """
        st = self.state
        if plan.snapshot_version != st.version:
            log.info("stale plan dropped", plan_version=plan.snapshot_version, version=st.version)
            self.stale_plans += 1
            st.wake()
            return False
        now = st.clock()
        never: list[pb.Job] = []
        jobs, forecasts = st.jobs, plan.forecasts
        for job_id, reason in plan.reasons.items():
            job = jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            if (
                job.reason == reason
                and not job.expected_start
                and job_id not in forecasts
                and reason != Reason.DEPENDENCY_NEVER_SATISFIED
                and not job.forecast_nodes
            ):
                continue  # the usual case in a deep queue: nothing new to write
            if reason == Reason.DEPENDENCY_NEVER_SATISFIED:
                never.append(job)
            head, sep, names = reason.partition("UnavailableNodes:")
            if sep:  # as Slurm prints it: ReqNodeNotAvail, UnavailableNodes:node[01-02]
                reason = head + sep + hostlist.compress(names.split(","))
            forecast = plan.forecasts.get(job_id)
            changed = pending.write(job, reason)
            if forecast is None:
                # (written only when set: most pending jobs have no forecast, pass after pass)
                if (
                    job.expected_start
                    or job.forecast_nodes
                    or job.forecast_reserved
                    or job.waits_for
                ):
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
        ch = Change(st, wake=False)
        launches: list[pb.Job] = []
        refused = 0
        for start in plan.starts:
            job = st.jobs.get(start.job_id)
            if job is None or job.state != js.PENDING:
                refused += 1
                continue
            if not all(self._free(p) for p in start.placements) or not start.placements:
                log.warning("start refused: its placement is taken", job_id=job.job_id)
                refused += 1
                continue
            for p in start.placements:
                st.nodes[p.node].allocate(
                    job.job_id, p.cpus, p.mem_mb, list(p.gpu_indices), p.shards
                )
            del job.allocations[:]
            for p in start.placements:
                job.allocations.add(
                    node=p.node,
                    cpus=p.cpus,
                    mem_mb=p.mem_mb,
                    gpu_indices=list(p.gpu_indices),
                    shards=p.shards,
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
            # whole GPUs (a shared GPU's shards are not a GPU of the job's own)
            job.num_gpus = sum(len(p.gpu_indices) - bool(p.shards) for p in start.placements)
            job.start_time = now
            pending.write(job, "None")  # Slurm's reason for a job that runs
            job.expected_start, job.forecast_nodes = 0, ""
            job.forecast_reserved = False
            del job.waits_for[:]
            ch.transition(
                job,
                "started",
                cause=f"sched:pass={pass_no}",
                now=now,
                detail=f"nodes={job.nodelist}",
            )
            launches.append(job)
        if launches:
            self.starts_total += len(launches)
            try:
                await ch.commit()  # RUNNING is durable before any node hears of it
            except StoreUnavailable:
                # the store went away under this pass; it writes these starts first when
                # it is back, and only then may the nodes hear of them
                st.spawn(self._launch_when_durable(launches))
                raise
            self._launch_all(launches)
        if plan.preemptions:
            await self.preempter.apply(plan, pass_no=pass_no)
        if never and st.config.scheduler.kill_invalid_depend:
            await self._cancel_never_satisfied(never)
        if refused:
            self.stale_plans += 1
            st.wake()  # what was refused gets a pass on the state as it is now
        return True

    def _free(self, p: Placement) -> bool:
        """Whether ``p`` fits on its node now (after the starts applied before it)."""
        node = self.state.nodes.get(p.node)
        if node is None or not node.schedulable:
            return False
        res = node.resources
        gpus = set(p.gpu_indices)
        if p.shards and p.gpu_indices:
            # its shared GPU: not given whole, and with the shards left
            g = p.gpu_indices[0]
            per_gpu = node.config.gpus.shards_per_gpu
            if g in node.alloc_gpus or node.alloc_shards.get(g, 0) + p.shards > per_gpu:
                return False
            gpus.discard(g)
        return (
            node.alloc_cpus + p.cpus <= res.cpus
            and node.alloc_mem_mb + p.mem_mb <= res.memory_mb
            and not gpus & node.alloc_gpus
            and not gpus & set(node.alloc_shards)
            and set(p.gpu_indices) <= set(node.gpu_indices)
        )

    async def _launch_when_durable(self, launches: list[pb.Job]) -> None:
        await self.state.store.wait_available()
        self._launch_all([j for j in launches if j.state == js.RUNNING])

    def _launch_all(self, launches: list[pb.Job]) -> None:
        st = self.state
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
            async with Change(st) as ch:
                self.endings.requeue(
                    ch, job, cause=f"dispatch:{node.name} unreachable", detail=str(exc)
                )
        finally:
            st.launching.discard(job.job_id)
