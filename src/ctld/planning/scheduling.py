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
from collections.abc import Callable, Iterable

import structlog

from corral import hostlist
from corral.errors import CorralError, StoreUnavailable
from corral.reasons import Reason
from corral.wire import corral_pb2 as pb
from ctld.core import pending
from ctld.core.commit import Change, liveness
from ctld.core.outbox import Dispatcher
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model import nodestate
from ctld.model.priorities import apply_factors
from ctld.ops.endings import Endings
from ctld.planning.preemption import Preempter
from ctld.planning.snapshot import SnapshotBuilder
from ctld.planning.starts import started_fields
from ctld.sched import JobRequest, Placement, Plan, Snapshot, Start, schedule
from ctld.sched.quick import MAX_CLASSES, quick_starts, reserved_jobs, waiting_firsts

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
        quick: SnapshotBuilder | None = None,
        *,
        empty_queue: Callable[[], None] | None = None,
        after_plan: Callable[[Plan], set[int]] = lambda plan: set(),
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
        # starts at submit (None: never): the snapshot builder, and what the last
        # applied plan left: the state's version less its arrivals, the reserved jobs
        self.quick = quick
        self._quick_base: tuple[int, tuple[int, ...]] | None = None
        # the last pass's queue, and the first of each class in it (made when needed)
        self._next_queue: tuple[JobRequest, ...] | None = None
        self._queue: tuple[JobRequest, ...] | None = None
        self._classes: tuple[int, ...] | None = None
        self._too_many = False
        self._plan = Plan(snapshot_version=0)  # the last applied plan
        self.quick_tries = 0  # short passes run for submits
        self._arrived: list[int] = []  # submitted, to be decided by the next short pass
        self._batch: asyncio.Future[None] | None = None
        self.quick_starts_total = 0
        # what an empty queue leaves the snapshot builder (SnapshotBuilder.empty_queue):
        # set, a pass with nothing pending builds no snapshot; None: every pass does
        self.empty_queue = empty_queue
        # power saving's look at each plan (ctld/powersave/power.py): the jobs waiting for power-ups
        self.after_plan = after_plan

    async def run(self) -> None:
        st = self.state
        while True:
            interval = st.config.controller.sched_interval_s  # a reconfigure changes it
            # a preempted job's grace time ends on time, not at the next periodic pass
            grace_end = st.preemptions.next_grace_end()
            wait = interval if grace_end is None else min(interval, grace_end - st.clock())
            await self._woken_or(max(wait, MIN_PASS_GAP_S))
            st.versions.wake_event.clear()
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
        if st.versions.wake_event.is_set():
            return
        woken = asyncio.ensure_future(st.versions.wake_event.wait())
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
            st = self.state
            st.preemptions.prune(st.jobs)
            if self.empty_queue is not None and not st.index.pending and not st.preemptions.claims:
                # nothing pending: the core would plan nothing (no start, reason,
                # forecast or preemption), so no snapshot of every node is made for it
                self.empty_queue()
                plan = Plan(snapshot_version=st.versions.version)
                self._next_queue = ()
                held_back = 0
            else:
                snap = self.snapshot()
                plan = schedule(snap)
                self._next_queue = snap.pending
                # jobs ctld held back are in the snapshot only to carry their reason
                held_back = sum(1 for r in snap.pending if r.blocked_reason)
        finally:
            if collecting:
                gc.enable()
        self.last_pass_s = time.perf_counter() - began
        self.last_considered = plan.considered - held_back
        await self.apply_plan(plan, pass_no=self.passes)

    def refresh_priorities(self) -> None:
        """Fair-share and age move with time: recalculate now and then, before a snapshot.

        A deep queue is recalculated in slices of ``RECALC_SLICE`` jobs, one per pass,
        so no pass holds the loop for the whole walk (at 50k pending, 0.7 s of CPU);
        each slice uses the time of its own pass."""
        st = self.state
        now = st.clock()
        if not self._recalc:
            if not st.acct.priorities.recalc_due(now):
                return
            st.acct.priorities.cluster_cpus = sum(n.resources.cpus for n in st.nodes.values())
            st.acct.priorities.refresh(now, st.on_node())
            self._recalc = list(st.index.pending)
            self._recalc.reverse()  # popped from the end: queue order
            # forget the predictions of jobs that left without running
            active = set(st.index.pending)
            active.update(j.job_id for j in st.on_node())
            for gone in [k for k in st.runs.predicted if k not in active]:
                del st.runs.predicted[gone]
        todo = self._recalc
        for _ in range(min(RECALC_SLICE, len(todo))):
            job = st.jobs.get(todo.pop())
            if job is None or job.state != js.PENDING or job.hold:
                continue
            if apply_factors(job, st.acct.priorities.factors(job, now)):
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
                    end_time=now,
                )

    async def apply_plan(self, plan: Plan, *, pass_no: int) -> bool:
        """Apply ``plan`` if it is still true; False if it was refused as stale.

        A plan is a function of its snapshot: once anything it read has changed (the
        version moved), it is refused whole and a new pass is asked for. Each start is
        checked again as well (the job still pending, its placements still free on
        schedulable nodes), so that no plan, however made, can oversubscribe a node.
        """
        st = self.state
        if plan.snapshot_version != st.versions.version:
            log.info(
                "stale plan dropped",
                plan_version=plan.snapshot_version,
                version=st.versions.version,
            )
            self.stale_plans += 1
            self._quick_base = None
            st.wake()
            return False
        never: list[pb.Job] = []
        jobs, forecasts = st.jobs, plan.forecasts
        powering = self.after_plan(plan)  # power saving: what waits for a power-up
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
            if pending.write_plan(
                job, reason, forecasts.get(job_id), powering_up=job_id in powering
            ):
                st.touch(job)
        _, refused = await self._start(plan.starts, cause=f"sched:pass={pass_no}")
        if plan.preemptions:
            await self.preempter.apply(plan, pass_no=pass_no)
        if never and st.config.scheduler.kill_invalid_depend:
            await self._cancel_never_satisfied(never)
        if refused:
            self.stale_plans += 1
            self._quick_base = None
            st.wake()  # what was refused gets a pass on the state as it is now
        else:
            # what a start at submit is decided against until anything else changes
            self._quick_base = (self._moved(), reserved_jobs(plan))
            # (a plan applied without its pass's queue, e.g. by a test: ends then wait
            # for a pass)
            self._queue, self._classes = self._next_queue, None
            self._next_queue, self._plan = None, plan
        return True

    async def _start(
        self, starts: Iterable[Start], *, cause: str, arrival: bool = False
    ) -> tuple[list[pb.Job], int]:
        """Start what a plan starts (each checked again: still pending, its placements
        still free), durable before any node hears of it; the started jobs, and how
        many starts were refused."""
        st = self.state
        now = st.clock()
        ch = Change(st, wake=False, arrival=arrival)
        launches: list[pb.Job] = []
        refused = 0
        for start in starts:
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
            ch.transition(
                job,
                "started",
                cause=cause,
                now=now,
                detail=f"nodes={hostlist.compress([p.node for p in start.placements])}",
                **started_fields(job, start, now),
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
        return launches, refused

    # ------------------------------------------------------------ a start at submit

    def _moved(self) -> int:
        """The state's version less the bumps of arrivals and of ends."""
        st = self.state
        return st.versions.version - st.versions.arrivals - st.versions.releases

    def quick_ready(self) -> bool:
        """Whether a new job may be decided at submit (sched/quick.py): a pass has
        applied its plan, only arrivals (submits, starts at submit) and ends changed
        the state since, and no job's --begin time has come since."""
        return (
            self.quick is not None
            and self._quick_base is not None
            and self._moved() == self._quick_base[0]
            and self.state.clock() < self.quick.next_eligible
        )

    def _waiting(self) -> tuple[int, ...] | None:
        """Besides the reserved jobs, the waiting jobs a start at submit weighs: the
        first of each class in the last pass's queue and the longest waiter
        (``waiting_firsts``; made once per pass). None: not known (a plan applied
        without its pass), or too many classes for a short pass."""
        if self._queue is None:
            return None
        if self._classes is None:
            firsts = waiting_firsts(self._queue, self._plan, MAX_CLASSES)
            self._classes, self._too_many = firsts or (), firsts is None
        return None if self._too_many else self._classes

    def check_release(self) -> bool:
        """A change that only ended jobs: True when a short pass over the waiting jobs'
        classes will decide whether a full pass is needed (woken only if one of them
        may start on what was freed); False: wake a pass now, as for any change."""
        if self.quick is None or self.quick.watching or not self.quick_ready():
            return False
        self._join_batch()
        return True

    def _join_batch(self) -> asyncio.Future[None]:
        batch = self._batch
        if batch is None:
            batch = self._batch = asyncio.get_running_loop().create_future()
            self.state.spawn(self._decide(batch))
        return batch

    async def start_on_submit(self, jobs: list[pb.Job]) -> None:
        """Start the new ``jobs`` now if a pass would, without waiting for one: placed
        by the core against the last plan's reservations (``quick_starts``). Returns
        once they are decided. Submits that arrive together are decided together (one
        short pass for a burst). A pass is asked for when any of them did not start (it
        writes their reasons and forecasts), or when the state moved on so that the
        short queue is not enough."""
        new = [j.job_id for j in jobs if j.state == js.PENDING and not j.hold]
        if not new:
            return
        self._arrived.extend(new)
        await asyncio.shield(self._join_batch())

    async def _decide(self, batch: asyncio.Future[None]) -> None:
        st = self.state
        try:
            await asyncio.sleep(0)  # the submits committed with these join the batch
            new, self._arrived, self._batch = self._arrived, [], None
            if self.quick is None or self._quick_base is None or not self.quick_ready():
                st.versions.wake_event.set()  # (the submits bumped the version already)
                return
            waiting = self._waiting()
            weighed = (*self._quick_base[1], *(waiting or ()))
            jobs = st.jobs
            if waiting is None or any(
                (j := jobs.get(job_id)) is None or j.state != js.PENDING for job_id in weighed
            ):
                # a job it would weigh has left the queue: its class-mates or the next
                # in line may start now, and only a pass knows
                st.versions.wake_event.set()
                return
            self.quick_tries += 1
            collecting = gc.isenabled()
            gc.disable()  # as in a pass: it allocates much and frees it all by refcounting
            try:
                starts = quick_starts(self.quick.build_quick(new, weighed), new)
            finally:
                if collecting:
                    gc.enable()
            if starts is None:  # e.g. a waiting job can start now: a pass decides
                st.versions.wake_event.set()
                return
            launches, _ = await self._start(starts, cause="sched:submit", arrival=True)
            self.quick_starts_total += len(launches)
            if len(launches) < len(new):
                st.versions.wake_event.set()
        except Exception:  # the pass decides them then
            log.exception("start at submit failed")
            st.versions.wake_event.set()
        finally:
            if self._batch is batch:
                self._batch = None
            batch.set_result(None)

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
            st.index.launching.add(job.job_id)  # from now until the node has answered
            st.spawn(self._launch(job))

    async def _launch(self, job: pb.Job) -> None:
        st = self.state
        node = st.nodes.get(job.batch_host)
        if node is None or job.state != js.RUNNING:  # requeued or ended before its turn
            st.index.launching.discard(job.job_id)
            return
        request = pb.LaunchJobRequest(
            job=st.whole(job),  # with its script and environment (ctld/model/records.py)
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
            if nodestate.may(node, "late"):  # nothing more goes there until it heartbeats
                liveness(st, node, "late", cause=f"dispatch:{node.name} unreachable")
            async with Change(st) as ch:
                self.endings.requeue(
                    ch, job, cause=f"dispatch:{node.name} unreachable", detail=str(exc)
                )
        finally:
            st.index.launching.discard(job.job_id)
