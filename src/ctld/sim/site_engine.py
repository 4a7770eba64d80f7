"""A replay of the site's own history through ctld's scheduling core, on virtual time.

The jobs of the window are submitted again at their submit times, to the site's nodes
and partitions under one configuration (``site.Site``), and each started job runs as
long as it really ran (``site_jobs``). Between events the replay does what ctld does:
priorities from the same multifactor formula and usage ledger (recomputed every 30 s,
a new job's at once), run-time predictions fed by the jobs that end, a job held back
for the reason ctld's ``pending.blocked_reason`` gives (a hold, ``--begin``, a
dependency by ``deps.evaluate``, its array's ``%N``), and after each batch of events
at one instant a pass of ``ctld.sched.schedule`` on a snapshot made the way ctld makes
one: its starts are applied, its preemptions too (the victims leave at the end of
their grace time, requeued or cancelled as their QOS says, their nodes claimed for the
preemptor meanwhile). Jobs of the window that were running or waiting when it opens
are carried in: the running ones keep their real nodes until their real end, the
waiting ones queue from the window's start. Forecasts are not made (they change no
start), so a pass is cheaper than ctld's.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass

from corral.jobspec import array_throttle
from corral.reasons import Reason
from corral.wire import corral_pb2 as pb
from ctld.core import pending
from ctld.model import deps
from ctld.model.priorities import RECALC_S, Priorities, apply_factors
from ctld.model.qos import QosTable
from ctld.model.usage import UsageLedger
from ctld.model.validate import node_lists, request_from_spec
from ctld.model.victims import ClaimRecord, Preemptions, Victim
from ctld.sched import (
    JobRequest,
    Placement,
    Plan,
    ReservationView,
    RunningView,
    Snapshot,
    schedule,
)
from ctld.sched.frag import pending_demands
from ctld.sched.predict import STEPS_S, RunTimePredictor
from ctld.sched.quick import priority_order
from ctld.sim import site_views
from ctld.sim.history import History
from ctld.sim.site import Site
from ctld.sim.site_jobs import ReplayJob
from ctld.sim.site_nodes import Nodes

# event kinds, in the order they are taken at one instant: what frees nodes first.
# TICK: something that changes with time alone (a --begin time come, a reservation's
# bound, a running job outliving its prediction, priorities due again). ctld sees it at
# its next periodic pass (within controller.sched_interval_s); the replay at once, so
# its starts may lead the real ones by up to that interval there
EVENT_KINDS = (END, GRACE, WITHDRAW, RELEASE, HOLD, SUBMIT, TICK) = range(7)


@dataclass
class Outcome:
    """What the replay did with one job."""

    job_id: int
    start: float = 0.0  # its first start (0: never started)
    end: float = 0.0
    partition: str = ""
    gpus: float = 0.0  # GPUs it held (shards as fractions)
    preempted: int = 0  # runs ended by a preemption
    runs: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (start, end)


class SiteReplay:
    def __init__(self, site: Site, history: History, jobs: list[ReplayJob]) -> None:
        config, acct = site.config, site.accounting
        self.site, self.history = site, history
        self.nodes = Nodes(site.nodes)
        self.shards = {s.name: s.shards_per_gpu for s in site.nodes}
        self.jobs = {rj.job.job_id: rj for rj in jobs}
        self.tasks: dict[int, list[pb.Job]] = {}
        self.named: dict[tuple[str, str], list[int]] = {}  # singleton's (user, name)
        for rj in jobs:
            if rj.job.array_job_id:
                self.tasks.setdefault(rj.job.array_job_id, []).append(rj.job)
            if rj.job.spec.dependency:
                self.named.setdefault((rj.job.user, rj.job.spec.name), [])
        for rj in jobs:
            key = (rj.job.user, rj.job.spec.name)
            if key in self.named:
                self.named[key].append(rj.job.job_id)
        self.now = 0.0
        self.throttles: dict[int, int] = {}  # arrays' %N room, counted down in a pass
        self.outcomes = {rj.job.job_id: Outcome(rj.job.job_id) for rj in jobs}
        self.by_id = {rj.job.job_id: rj.job for rj in jobs}
        self.views: dict[int, RunningView] = {}  # running jobs' views, made at their start
        self.qos = QosTable(config)
        self.qos.replace(acct.qos_table())
        self.ledger = UsageLedger(config.priority, lambda q: self.qos.get(q).usage_factor)
        self.priorities = Priorities(config, self.ledger)
        self.priorities.set_tree(acct.share_tree())
        self.priorities.set_qos(acct.qos_table())
        self.priorities.with_users((rj.job.account, rj.job.user) for rj in jobs)
        self.priorities.cluster_cpus = sum(s.cpus for s in site.nodes)
        self.predictor = RunTimePredictor()
        for done in history.before:  # what a ctld started at the window's start knew
            self.ledger.add_finished(done)
            if done.start_time > 0:
                self.predictor.observe(
                    done.user, done.end_time - done.start_time, done.time_limit_s
                )
        self.settings = site_views.settings_of(site)
        self.limits = acct.limit_set()
        self.partitions = site_views.partitions_of(site)
        self.requeue_delay = config.controller.requeue_delay_s
        self.kill_wait = config.controller.kill_wait_s
        self.preemptions = Preemptions()
        self.pending: dict[int, pb.Job] = {}
        self.running: dict[int, tuple[Placement, ...]] = {}
        self.run_no: dict[int, int] = {}  # which of its runs a job is on
        self.started: dict[int, int] = {}  # starts so far: an END names the one it ends
        self.requests: dict[int, JobRequest] = {}
        self.predicted: dict[int, int] = {}
        self.array_running: dict[int, int] = {}
        self.events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.passes = 0
        self._recalc_tick = 0.0
        self._resv: tuple[float, tuple[ReservationView, ...]] = (-math.inf, ())
        self._resv_bounds = sorted(
            {
                t
                for v in history.reservations
                for t in (v.since, v.until, v.resv.start_time, v.resv.end_time)
                if t < math.inf
            }
        )

    # ------------------------------------------------------------ events

    def push(self, at: float, kind: int, job_id: int = 0, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, kind, self._seq, job_id, token))

    def run(self) -> dict[int, Outcome]:
        start = self.history.start
        for rj in self.jobs.values():
            job = rj.job
            if not rj.counted and rj.real is not None and 0 < rj.real.start < start:
                self._pin(rj)  # running when the window opens: on its real nodes
                continue
            self.push(max(job.submit_time, start), SUBMIT, job.job_id)
            for since, until in rj.holds:
                self.push(max(since, start), HOLD, job.job_id)
                if until < math.inf:
                    self.push(max(until, start), RELEASE, job.job_id)
            if rj.withdraw_at < math.inf:
                self.push(max(rj.withdraw_at, start), WITHDRAW, job.job_id)
            if job.eligible_time > job.submit_time:
                self.push(job.eligible_time, TICK)
        for t in self._resv_bounds:
            if t >= start:
                self.push(t, TICK)
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] <= now:
                _at, kind, _seq, job_id, token = heapq.heappop(self.events)
                self._handle(kind, job_id, token, now)
            self._pass(now)
            due = self.priorities.last_calc + RECALC_S
            # (while anything else is still to happen: a queue nothing will ever move
            # again is not replayed for ever)
            if self.pending and self.events and due > now and due != self._recalc_tick:
                self._recalc_tick = due
                self.push(due, TICK)  # priorities due again
        return self.outcomes

    def _handle(self, kind: int, job_id: int, token: int, now: float) -> None:
        rj = self.jobs.get(job_id)
        job = rj.job if rj is not None else None
        if kind == SUBMIT and job is not None:
            self.pending[job_id] = job
            self._reprioritise(job, now)
        elif kind == END and job is not None and self.started.get(job_id) == token:
            self._ended(job_id, now)
        elif kind == GRACE and job is not None:
            victim = self.preemptions.victims.get(job_id)
            if victim is not None and job.job_id in self.running and victim.run == token:
                self._preempted(job_id, victim, now)
        elif kind == WITHDRAW and job is not None:
            if job_id in self.pending:
                del self.pending[job_id]
                job.state, job.end_time = pb.JOB_STATE_CANCELLED, now
                self.outcomes[job_id].end = now
            elif job_id in self.running:
                self._stop(job_id, now, pb.JOB_STATE_CANCELLED)
        elif kind == HOLD and job is not None:
            job.hold = pb.HOLD_USER
            self.requests.pop(job_id, None)
        elif kind == RELEASE and job is not None:
            job.hold = pb.HOLD_NONE
            self._reprioritise(job, now)

    def _pin(self, rj: ReplayJob) -> None:
        """A job running when the window opens: its real nodes until its real end."""
        job, real = rj.job, rj.real
        assert real is not None
        placements = real.placements
        if not self.nodes.fits(placements):
            return
        self._started(job, real.partition, placements, real.start)
        self.run_no[job.job_id] = len(rj.runs_s) - 1
        end = real.end if real.end > 0 else real.start + rj.runs_s[-1]
        self.push(max(end, self.history.start), END, job.job_id, self.started[job.job_id])

    # ------------------------------------------------------------ one pass

    def _pass(self, now: float) -> None:
        if not self.pending and not self.preemptions.claims:
            return
        self.now, self.throttles = now, {}
        if self.priorities.recalc_due(now):
            self.priorities.refresh(now, [self.jobs[j].job for j in self.running])
            for job in self.pending.values():
                if not job.hold:
                    self._set_priority(job, now)
        if self.preemptions.victims or self.preemptions.claims:
            self.preemptions.prune(self.by_id)
        queue = sorted(
            (self._request(job, now) for job in self.pending.values()), key=priority_order
        )
        snap = Snapshot(
            version=self.passes,
            now=now,
            nodes=self.nodes.views(),
            partitions=self.partitions,
            pending=tuple(queue),
            running=tuple(self._running_view(j) for j in self.running),
            reservations=self._reservations(now),
            settings=self.settings,
            limits=self.limits,
            qos=self.qos.views(),
            claims=self.preemptions.claim_views(),
        )
        if self.settings.placement in ("frag", "fgd"):
            snap = dataclasses.replace(snap, demands=pending_demands(snap))
        self.passes += 1
        self._apply(schedule(snap), now)

    def _apply(self, plan: Plan, now: float) -> None:
        for st in plan.starts:
            job = self.pending.get(st.job_id)
            if job is None or not self.nodes.fits(st.placements):
                continue
            del self.pending[st.job_id]
            self._started(job, st.partition, st.placements, now)
            rj = self.jobs[st.job_id]
            run = self.run_no.setdefault(st.job_id, 0)
            length = rj.runs_s[min(run, len(rj.runs_s) - 1)]
            self.push(now + length, END, st.job_id, self.started[st.job_id])
            self._outlived(st.job_id, now, length)
        for p in plan.preemptions:
            self._preempt(p.job_id, p.partition, p.placements, p.victims, now)
        if self.site.config.scheduler.kill_invalid_depend:
            for job_id, reason in plan.reasons.items():
                if reason == Reason.DEPENDENCY_NEVER_SATISFIED and job_id in self.pending:
                    job = self.pending.pop(job_id)
                    job.state, job.end_time = pb.JOB_STATE_CANCELLED, now

    def _outlived(self, job_id: int, now: float, length: float) -> None:
        """Passes when the job outlives its prediction and each later step of it: the
        plan changes then (ctld's periodic pass sees it), though no event happens."""
        predicted = self.predicted.get(job_id, 0)
        if not self.settings.predict or predicted <= 0:
            return
        for at in (predicted, *(s for s in STEPS_S if s > predicted)):
            if at >= length:
                break
            self.push(now + at, TICK)

    def _request(self, job: pb.Job, now: float) -> JobRequest:
        blocked = pending.blocked_reason(job, now, self._dependency, self._throttled)
        if blocked:
            return JobRequest(
                job_id=job.job_id,
                partitions=self._partitions(job),
                priority=job.priority,
                submit_time=job.submit_time,
                blocked_reason=blocked,
            )
        req = self.requests.get(job.job_id)
        if req is None:
            predicted = self.predictor.predict(job.user, job.time_limit_s)
            self.predicted[job.job_id] = predicted
            nodelist, exclude = node_lists(job.spec)
            req = request_from_spec(
                job.spec,
                job.job_id,
                self._partitions(job),
                job.time_limit_s,
                nodelist=nodelist,
                exclude=exclude,
                priority=job.priority,
                user=job.user,
                account=job.account,
                qos=job.qos,
                submit_time=job.submit_time,
                eligible_time=max(job.eligible_time, job.submit_time),
                predicted_s=predicted,
            )
            self.requests[job.job_id] = req
        elif req.priority != job.priority:
            req = self.requests[job.job_id] = req.with_priority(job.priority)
        return req

    @staticmethod
    def _partitions(job: pb.Job) -> tuple[str, ...]:
        return tuple(job.spec.partitions) or ((job.partition,) if job.partition else ())

    def _dependency(self, job: pb.Job) -> deps.DepState:
        return deps.evaluate(job, self._lookup, self.now, self._singleton, self._tasks_of)

    def _lookup(self, job_id: int) -> pb.Job | None:
        rj = self.jobs.get(job_id)
        return rj.job if rj is not None else None

    def _tasks_of(self, array_id: int) -> list[pb.Job]:
        return self.tasks.get(array_id, [])

    def _singleton(self, job: pb.Job) -> bool:
        return any(
            other < job.job_id and (other in self.pending or other in self.running)
            for other in self.named.get((job.user, job.spec.name), ())
        )

    def _throttled(self, job: pb.Job) -> bool:
        """As ctld's snapshot counts it: the array's %N less its running tasks, counted
        down over the queue (in the order of the pending jobs) within one pass."""
        limit = array_throttle(job.spec) if job.array_job_id else None
        if limit is None:
            return False
        room = self.throttles.get(job.array_job_id)
        if room is None:
            room = limit - self.array_running.get(job.array_job_id, 0)
        if room <= 0:
            self.throttles[job.array_job_id] = 0
            return True
        self.throttles[job.array_job_id] = room - 1
        return False

    def _running_view(self, job_id: int) -> RunningView:
        view = self.views.get(job_id)
        if view is None:
            view = self.views[job_id] = self._make_view(job_id)
        if self.preemptions.victims and job_id in self.preemptions.victims:
            return self._make_view(job_id)
        return view

    def _make_view(self, job_id: int) -> RunningView:
        victim = self.preemptions.victims.get(job_id)
        placements, predicted = self.running[job_id], self.predicted.get(job_id, 0)
        return site_views.running_view(self.jobs[job_id].job, placements, predicted, victim)

    def _reservations(self, now: float) -> tuple[ReservationView, ...]:
        at, views = self._resv
        if at != now:
            views = site_views.reservation_views(self.history, now)
            self._resv = (now, views)
        return views

    # ------------------------------------------------------------ priorities

    def _reprioritise(self, job: pb.Job, now: float) -> None:
        if job.job_id in self.pending and not job.hold:
            if self.priorities.last_calc < 0:
                self.priorities.refresh(now, [self.jobs[j].job for j in self.running])
            self._set_priority(job, now)

    def _set_priority(self, job: pb.Job, now: float) -> None:
        if apply_factors(job, self.priorities.factors(job, now)):
            pass  # the request picks the new priority up (_request)

    # ------------------------------------------------------------ starts and ends

    def _started(
        self, job: pb.Job, partition: str, placements: tuple[Placement, ...], now: float
    ) -> None:
        self.nodes.take(job.job_id, placements)
        self.running[job.job_id] = placements
        self.started[job.job_id] = self.started.get(job.job_id, 0) + 1
        job.state, job.start_time, job.partition = pb.JOB_STATE_RUNNING, now, partition
        del job.allocations[:]
        for p in placements:
            job.allocations.add(
                node=p.node,
                cpus=p.cpus,
                mem_mb=p.mem_mb,
                gpu_indices=p.gpu_indices,
                shards=p.shards,
            )
        if job.array_job_id:
            self.array_running[job.array_job_id] = self.array_running.get(job.array_job_id, 0) + 1
        out = self.outcomes[job.job_id]
        out.runs.append((now, 0.0))
        if not out.start:
            out.start, out.partition = now, partition
            out.gpus = sum(
                p.shards / max(self.shards.get(p.node, 1), 1) if p.shards else len(p.gpu_indices)
                for p in placements
            )

    def _release(self, job: pb.Job, now: float) -> None:
        placements = self.running.pop(job.job_id)
        self.views.pop(job.job_id, None)
        self.nodes.give_back(job.job_id, placements)
        if job.array_job_id:
            self.array_running[job.array_job_id] -= 1
        out = self.outcomes[job.job_id]
        out.runs[-1] = (out.runs[-1][0], now)
        self.requests.pop(job.job_id, None)

    def _ended(self, job_id: int, now: float) -> None:
        rj = self.jobs[job_id]
        job = rj.job
        run = self.run_no.get(job_id, 0)
        if run + 1 < len(rj.runs_s):  # a run that really ended in a requeue (node failure)
            self._requeue(job, now, count=False)
            self.run_no[job_id] = run + 1
            return
        self._stop(job_id, now, rj.final_state)

    def _stop(self, job_id: int, now: float, state: int) -> None:
        job = self.jobs[job_id].job
        self._release(job, now)
        job.state = state  # type: ignore[assignment]
        job.end_time = now
        self.ledger.add_finished(job)
        self.predictor.observe(job.user, now - job.start_time, job.time_limit_s)
        self.predicted.pop(job_id, None)
        self.outcomes[job_id].end = now

    def _requeue(self, job: pb.Job, now: float, *, count: bool) -> None:
        """Back in the queue after a run that ended early (its usage charged)."""
        ended = pb.Job()
        ended.CopyFrom(job)
        ended.end_time = now
        self.ledger.add_finished(ended)
        self._release(job, now)
        job.state, job.start_time = pb.JOB_STATE_PENDING, 0.0
        job.restart_count += 1
        del job.allocations[:]
        if self.requeue_delay > 0:
            job.eligible_time = now + self.requeue_delay
            self.push(job.eligible_time, TICK)
        self.pending[job.job_id] = job
        if count:
            self.outcomes[job.job_id].preempted += 1

    # ------------------------------------------------------------ preemption

    def _preempt(
        self,
        job_id: int,
        partition: str,
        placements: tuple[Placement, ...],
        victims: tuple[int, ...],
        now: float,
    ) -> None:
        claim = ClaimRecord(job_id, partition, placements)
        for v in victims:
            if v not in self.running or v in self.preemptions.victims:
                continue
            job = self.jobs[v].job
            grace = float(self.qos.grace_s(job.qos))
            self.preemptions.victims[v] = Victim(
                v,
                job.restart_count,
                job_id,
                self.qos.preempt_mode(job.qos),
                now + grace,
                now + grace + self.kill_wait,
            )
            claim.victims.add(v)
            self.push(now + grace, GRACE, v, job.restart_count)
        self.preemptions.claims[job_id] = claim

    def _preempted(self, job_id: int, victim: Victim, now: float) -> None:
        job = self.jobs[job_id].job
        if victim.mode == "requeue":
            self._requeue(job, now, count=True)
        else:
            self.outcomes[job_id].preempted += 1
            self._stop(job_id, now, pb.JOB_STATE_PREEMPTED)
