"""The pass: start what can start, reserve for the top blocked jobs, backfill the rest.

Pending jobs are taken highest priority first. Each one starts now if it fits on its
partition's nodes for its whole time limit without touching any reservation; if not,
the first ``reserve_depth`` such jobs get a reservation at the earliest time they fit
(EASY backfill when that is 1), which every later job must leave intact, and the next
``forecast_depth`` get an expected start without one. Jobs with no time limit are
treated as running forever. Everything is a function of the snapshot alone, so a plan
is reproducible and the simulator runs the very same code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from corral.reasons import Reason
from ctld.sched import preempt
from ctld.sched.frag import Fragmentation, pending_demands
from ctld.sched.limits import LimitTracker
from ctld.sched.model import (
    INFINITY,
    Forecast,
    JobRequest,
    PartitionView,
    Placement,
    Plan,
    Preemption,
    RunningView,
    Snapshot,
    Start,
)
from ctld.sched.predict import expected_end
from ctld.sched.profile import Avail, Hold, NodeProfile, Release
from ctld.sched.shape import Shape, job_shape

# Slurm's pending reasons used here (the one list: corral/reasons.py)
RESOURCES = Reason.RESOURCES
PRIORITY = Reason.PRIORITY
PARTITION_DOWN = Reason.PARTITION_DOWN
PARTITION_TIME_LIMIT = Reason.PARTITION_TIME_LIMIT
PARTITION_NODE_LIMIT = Reason.PARTITION_NODE_LIMIT
REQ_NODE_NOT_AVAIL = Reason.REQ_NODE_NOT_AVAIL
NODES_DOWN = Reason.NODES_DOWN
RESERVATION = Reason.RESERVATION
QOS_MAX_JOBS_PER_USER = Reason.QOS_MAX_JOBS_PER_USER
UNAVAILABLE_NODES = f"{Reason.REQ_NODE_NOT_AVAIL}, UnavailableNodes:"  # + the nodes


# preemption searches per pass (each looks at every node of its partitions): a deep
# queue of preemptors is served over several passes, not in one long one that would
# hold up ctld's loop
MAX_PREEMPT_SEARCHES = 50


def _unavailable(names: list[str]) -> str:
    """Slurm's reason when nodes the job requires (-w) are down or drained (ctld prints
    the names as a compressed hostlist)."""
    return UNAVAILABLE_NODES + ",".join(names)


_Prepared = tuple[Shape, list["_Candidate"], float, float]


@dataclass(frozen=True)
class _Candidate:
    partition: PartitionView
    nodes: tuple[NodeProfile, ...]
    required: frozenset[str]  # -w nodes the allocation must include
    ignore: str  # the job's own reservation, which its holds do not block
    not_before: float  # a reservation's start
    not_after: float  # a reservation's end
    members: frozenset[str] = frozenset()  # names of ``nodes``


class _Pass:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.settings = snap.settings
        self.nodes = {v.name: NodeProfile.from_view(v, i) for i, v in enumerate(snap.nodes)}
        self.partitions = {p.name: p for p in snap.partitions}
        self.reservations = {r.name: r for r in snap.reservations}
        self.qos_limits = dict(snap.settings.qos_max_jobs_per_user)
        self.user_jobs: dict[tuple[str, str], int] = {}
        self.predict = snap.settings.predict
        # preemption: who may preempt whom, the claims of earlier passes, and the jobs
        # already being preempted (their end is their preemption's deadline)
        self.qos = {q.name: q for q in snap.qos}
        self.may_preempt = preempt.targets(snap.qos)
        self.claims = {c.job_id: c for c in snap.claims}
        self.preempted: set[int] = {v for c in snap.claims for v in c.victims}
        self.preemptions: list[Preemption] = []
        # shapes that found nothing to preempt: a pass only takes resources and
        # victims away, so they find nothing later in it either
        self.no_preempt: set[tuple[object, ...]] = set()
        self.pools: dict[str, list[RunningView]] = {}  # by preemptor QOS, lowest first
        self.preempt_searches = 0
        self.limits = LimitTracker(snap.limits, snap.running)
        for run in snap.running:
            end = limit_end = max(run.end_time, self.now + 1.0)  # overrunning: about to end
            if self.predict and run.predicted_s > 0 and run.job_id not in self.preempted:
                end = expected_end(run.start_time, run.predicted_s, run.end_time, self.now)
                end = max(end, self.now + 1.0)
            for p in run.placements:
                node = self.nodes.get(p.node)
                if node is not None:
                    node.releases.append(
                        Release(
                            end, p.cpus, p.mem_mb, frozenset(p.gpu_indices), run.job_id, limit_end
                        )
                    )
            key = (run.qos, run.user)
            self.user_jobs[key] = self.user_jobs.get(key, 0) + 1
        for resv in snap.reservations:
            for name in resv.nodes:
                node = self.nodes.get(name)
                if node is not None and resv.end > self.now:
                    node.hold(
                        Hold(
                            start=resv.start,
                            end=resv.end,
                            cpus=node.view.cpus_total,
                            mem=node.view.mem_total_mb,
                            gpus=node.all_gpus,
                            owner=f"resv:{resv.name}",
                        )
                    )
        for claim in snap.claims:
            victims = frozenset(claim.victims)
            for p in claim.placements:
                node = self.nodes.get(p.node)
                if node is not None:
                    owner = preempt.claim_owner(claim.job_id)
                    for h in preempt.claim_holds(
                        node, owner, p.cpus, p.mem_mb, p.gpu_indices, victims, self.now
                    ):
                        node.hold(h)
        self.profile_version = 0  # bumped when a start or hold changes any node
        self.no_fit_now: set[tuple[object, ...]] = set()
        self.candidates: dict[tuple[object, ...], _Candidate | str] = {}
        # nodes by free GPU count: best fit looks at the fullest nodes first and stops
        # there, instead of scanning the whole cluster for every start
        self.max_gpus = max((len(n.all_gpus) for n in self.nodes.values()), default=0)
        self.buckets: list[dict[str, NodeProfile]] = [{} for _ in range(self.max_gpus + 1)]
        for node in self.nodes.values():
            self.buckets[len(node.free_gpus)][node.name] = node
        self.forecast_cache: dict[tuple[object, ...], tuple[int, Forecast | None]] = {}
        self.frag = Fragmentation(snap.demands or pending_demands(snap))
        self.starts: list[Start] = []
        self.reasons: dict[int, str] = {}
        self.forecasts: dict[int, Forecast] = {}
        self.reserved = 0
        self.forecasted = 0
        self.blocked_partitions: set[str] = set()
        self.fcfs_blocked = False
        # classes (JobRequest.klass) that failed to start in this pass: the reason its
        # prepare gave (None: prepared, then found no room), and what blocked() needs
        self.dead: dict[int, tuple[str, _Prepared | None, Shape]] = {}
        # the reason a class's later blocked jobs get once no forecast is left to make
        self.later: dict[int, str] = {}
        self.tests = 0  # full tries that started nothing, against settings.max_job_test
        self.max_tests = snap.settings.max_job_test
        self.starving: frozenset[int] = frozenset()  # past the starvation guard's threshold

    # ------------------------------------------------------------ the pass

    def run(self) -> Plan:
        considered = 0
        pending = self.snap.pending
        if self.settings.starve_after_s > 0:
            pending, self.starving = starving_first(
                pending, self.now - self.settings.starve_after_s
            )
        shortest = self.settings.backfill_order == "shortest" and self.settings.backfill
        for i, req in enumerate(pending):
            if shortest and self.reserved >= self.settings.reserve_depth:
                # the reserved jobs are placed: everything behind them is a backfill
                # candidate, tried shortest predicted run first (EASY-SJBF)
                self.backfill_shortest_first(pending[i:])
                considered = len(pending)
                break
            considered += 1
            if req.blocked_reason:
                self.reasons[req.job_id] = req.blocked_reason
                continue
            self.consider(req)
        return Plan(
            snapshot_version=self.snap.version,
            starts=tuple(self.starts),
            reasons=self.reasons,
            forecasts=self.forecasts,
            considered=considered,
            preemptions=tuple(self.preemptions),
        )

    def backfill_shortest_first(self, rest: tuple[JobRequest, ...]) -> None:
        expected_of: dict[int, float] = {}
        keys: list[float] = []
        for req in rest:
            expected = expected_of.get(req.klass)
            if expected is None:
                expected = expected_of[req.klass] = self.durations(req)[1]
            keys.append(expected)
        # a stable sort: equal predictions keep their priority order
        order = sorted(range(len(rest)), key=keys.__getitem__)
        # what blocked() needs for each job left waiting, by its place in priority order
        waiting: list[_Prepared | None] = [None] * len(rest)
        for i in order:
            req = rest[i]
            if req.blocked_reason:
                self.reasons[req.job_id] = req.blocked_reason
                continue
            dead = None if self.own_way(req) else self.dead.get(req.klass)
            prepared = self.class_mate(req, dead) if dead is not None else self.tried(req)
            if prepared is not None and self.try_preempt(req, *prepared):
                prepared = None  # preempting for it, or waiting on its claim
            waiting[i] = prepared
        # reasons and forecasts for the ones left, in priority order again
        later_of, reasons, settings = self.later, self.reasons, self.settings
        for i, prepared in enumerate(waiting):
            if prepared is None:
                continue
            req = rest[i]
            later = later_of.get(req.klass)
            if (
                later is not None
                and req.job_id not in self.starving
                and self.reserved >= settings.reserve_depth
                and self.forecasted >= settings.forecast_depth
            ):
                reasons[req.job_id] = later  # blocked()'s own shortcut, without the call
                continue
            self.blocked(req, *prepared)

    def tried(self, req: JobRequest) -> _Prepared | None:
        """Try ``req`` in full: start it, or return what blocked() needs (None: its
        reason is set, or it is past ``max_job_test`` and left out of the plan)."""
        if self.max_tests and self.tests >= self.max_tests:
            return None
        prepared = self.prepare(req)
        if prepared is None:
            self.tests += 1
            self.dead[req.klass] = (self.reasons[req.job_id], None, job_shape(req))
            return None
        if self.try_start(req, *prepared):
            return None  # a start is no try: the limit bounds fruitless work only
        self.tests += 1
        if req.job_id not in self.claims:  # a claim's candidates are its owner's alone
            self.dead[req.klass] = ("", prepared, prepared[0])
        return prepared

    def own_way(self, req: JobRequest) -> bool:
        """A job never treated as its class's mate: a starving one, or one with a claim
        (resources kept for it alone)."""
        return req.job_id in self.starving or req.job_id in self.claims

    def class_mate(
        self, req: JobRequest, dead: tuple[str, _Prepared | None, Shape]
    ) -> _Prepared | None:
        """``req``'s class found no start in this pass, so neither does ``req`` (a pass
        only takes resources away, and limits only fill): prepare's checks in its
        order, without the search. Returns what blocked() needs, or None with the
        reason set. (A starving job is never a class-mate: it is planned its own way.)"""
        limit = self.qos_limits.get(req.qos, 0)
        if limit and self.user_jobs.get((req.qos, req.user), 0) >= limit:
            self.reasons[req.job_id] = QOS_MAX_JOBS_PER_USER
            return None
        reason, prepared, shape = dead
        over = self.limits.blocked(req, shape)
        if over:
            self.reasons[req.job_id] = over
            return None
        if prepared is None:
            self.reasons[req.job_id] = reason
            return None
        if self.fcfs_blocked:
            self.reasons[req.job_id] = PRIORITY
            return None
        return prepared

    def durations(self, req: JobRequest) -> tuple[float, float]:
        """(its limit, what the plan expects it to run): the prediction when planning
        with predictions, never more than the limit."""
        duration = INFINITY if req.time_limit_s < 0 else float(max(req.time_limit_s, 1))
        if self.predict and req.predicted_s > 0:
            return duration, min(float(req.predicted_s), duration)
        return duration, duration

    def prepare(self, req: JobRequest) -> _Prepared | None:
        """Its shape, candidate partitions and durations; None (reason set) if it has none."""
        limit = self.qos_limits.get(req.qos, 0)
        if limit and self.user_jobs.get((req.qos, req.user), 0) >= limit:
            self.reasons[req.job_id] = QOS_MAX_JOBS_PER_USER
            return None
        shape = job_shape(req)
        over = self.limits.blocked(req, shape)
        if over:  # an accounting limit: it waits without holding anything back for it
            self.reasons[req.job_id] = over
            return None
        duration, expected = self.durations(req)
        candidates: list[_Candidate] = []
        reason: str = RESOURCES
        for part_name in req.partitions:
            cand_or_reason = self.candidate(req, shape, part_name)
            if isinstance(cand_or_reason, str):
                reason = cand_or_reason
                continue
            candidates.append(cand_or_reason)
        if not candidates:
            self.reasons[req.job_id] = reason
            return None
        if self.fcfs_blocked:
            self.reasons[req.job_id] = PRIORITY
            return None
        if req.job_id in self.claims:  # what was freed for it is its own
            owner = preempt.claim_owner(req.job_id)
            candidates = [dataclasses.replace(c, ignore=owner) for c in candidates]
        return shape, candidates, duration, expected

    def try_start(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[_Candidate],
        duration: float,
        expected: float,
    ) -> bool:
        for cand in candidates:
            if self.now < cand.not_before:
                continue
            chosen = self.fit_now(req, shape, cand, duration, expected)
            if chosen is not None:
                # whether it fits only by its prediction (not to its limit)
                relied = expected < duration and any(
                    node.holds
                    and not node.fits(
                        node.window(self.now, self.now + duration, cand.ignore),
                        shape,
                        req.exclusive,
                    )
                    for node, _ in chosen
                )
                self.start(req, shape, cand, chosen, expected, duration, relied)
                return True
        return False

    def consider(self, req: JobRequest) -> None:
        dead = None if self.own_way(req) else self.dead.get(req.klass)
        prepared = self.class_mate(req, dead) if dead is not None else self.tried(req)
        if prepared is not None and not self.try_preempt(req, *prepared):
            self.blocked(req, *prepared)

    def candidate(self, req: JobRequest, shape: Shape, part_name: str) -> _Candidate | str:
        part = self.partitions.get(part_name)
        # DRAIN refuses new submissions (at submit) but still runs its queue; DOWN and
        # INACTIVE keep their queue waiting
        if part is None or part.state not in ("UP", "DRAIN"):
            return PARTITION_DOWN
        if part.max_time_s >= 0 and (req.time_limit_s < 0 or req.time_limit_s > part.max_time_s):
            return PARTITION_TIME_LIMIT
        if part.max_nodes and shape.nodes > part.max_nodes:
            return PARTITION_NODE_LIMIT
        # everything below depends on static node facts only: computed once per pass
        # for each distinct (partition, shape, constraints)
        key = (part_name, shape, req.gpu_type, req.nodelist, req.exclude, req.reservation)
        cached = self.candidates.get(key)
        if cached is None:
            cached = self._candidate(req, shape, part)
            self.candidates[key] = cached
        return cached

    def _candidate(self, req: JobRequest, shape: Shape, part: PartitionView) -> _Candidate | str:
        ignore, not_before, not_after = "", self.now, INFINITY
        allowed: set[str] | None = None
        if req.reservation:
            resv = self.reservations.get(req.reservation)
            if resv is None or resv.end <= self.now:
                return RESERVATION
            ignore, not_before, not_after = f"resv:{resv.name}", resv.start, resv.end
            allowed = set(resv.nodes)
        members = set(part.nodes)
        required = frozenset(req.nodelist)
        if not required <= members or (allowed is not None and not required <= allowed):
            return REQ_NODE_NOT_AVAIL
        excluded = set(req.exclude)
        nodes = tuple(
            node
            for name in part.nodes
            if (node := self.nodes.get(name)) is not None
            and node.view.schedulable
            and name not in excluded
            and (allowed is None or name in allowed)
            and node.could_ever_fit(shape, req.gpu_type)
        )
        usable = {n.name for n in nodes}
        # down or drained nodes that would otherwise do: Slurm names the required ones
        down = [
            name
            for name in part.nodes
            if (node := self.nodes.get(name)) is not None
            and not node.view.schedulable
            and name not in excluded
            and (allowed is None or name in allowed)
            and node.could_ever_fit(shape, req.gpu_type)
        ]
        if not required <= usable:
            unavailable = [n for n in down if n in required]
            return _unavailable(unavailable) if unavailable else REQ_NODE_NOT_AVAIL
        if len(nodes) < shape.nodes:
            if down and len(nodes) + len(down) >= shape.nodes:
                return NODES_DOWN  # it would fit but for them (Slurm's words)
            return REQ_NODE_NOT_AVAIL if required or allowed is not None else RESOURCES
        return _Candidate(part, nodes, required, ignore, not_before, not_after, frozenset(usable))

    # ------------------------------------------------------------ now

    def fit_now(
        self, req: JobRequest, shape: Shape, cand: _Candidate, duration: float, expected: float
    ) -> list[tuple[NodeProfile, Avail]] | None:
        # the same shape that found no room now finds none later in this pass either:
        # a pass only ever takes resources away from "now"
        key: tuple[object, ...] = (cand.partition.name, shape, req.gpu_type, req.exclusive)
        key += (cand.required, req.exclude, cand.ignore)
        if key in self.no_fit_now:
            return None
        end = self.now + duration
        if end > cand.not_after:
            return None
        # advance reservations are kept against the limit, the reserved jobs ahead
        # against the prediction (a wrong one can delay them, never an advance one)
        job_end = self.now + expected
        if self.settings.placement == "pack" and not req.exclusive and not cand.required:
            return self._fit_now_packed(shape, cand, end, job_end, key)
        fitting = []
        free_now = 0
        required_free = 0
        for node in cand.nodes:
            now_avail = Avail(
                node.free_cpus, node.free_mem, frozenset(node.free_gpus), not node.busy
            )
            if not node.fits(now_avail, shape, req.exclusive):
                continue
            free_now += 1
            required_free += node.name in cand.required
            avail = node.window(self.now, end, cand.ignore, job_end) if node.holds else now_avail
            if node.fits(avail, shape, req.exclusive):
                fitting.append((node, avail))
        if free_now < shape.nodes or required_free < len(cand.required):
            self.no_fit_now.add(key)
        return self.choose(fitting, shape, cand, self.now, job_end)

    def _fit_now_packed(
        self, shape: Shape, cand: _Candidate, end: float, job_end: float, key: tuple[object, ...]
    ) -> list[tuple[NodeProfile, Avail]] | None:
        fitting: list[tuple[NodeProfile, Avail]] = []
        free_now = 0
        for free_gpus in range(shape.gpus_per_node, self.max_gpus + 1):
            for node in self.buckets[free_gpus].values():
                if (
                    node.name not in cand.members
                    or node.free_cpus < shape.cpus_per_node
                    or node.free_mem < shape.mem_per_node_mb
                ):
                    continue
                free_now += 1
                now_avail = Avail(
                    node.free_cpus, node.free_mem, frozenset(node.free_gpus), not node.busy
                )
                avail = (
                    node.window(self.now, end, cand.ignore, job_end) if node.holds else now_avail
                )
                if node.fits(avail, shape, False):
                    fitting.append((node, avail))
                    if free_gpus == self.max_gpus and len(fitting) >= shape.nodes:
                        break  # whole free nodes: any of them is as good a fit
            if len(fitting) >= shape.nodes:
                return self.choose(fitting, shape, cand)
        if free_now < shape.nodes:
            self.no_fit_now.add(key)
        return None

    def choose(
        self,
        fitting: list[tuple[NodeProfile, Avail]],
        shape: Shape,
        cand: _Candidate,
        at: float = 0.0,
        job_end: float = INFINITY,
    ) -> list[tuple[NodeProfile, Avail]] | None:
        if len(fitting) < shape.nodes:
            return None
        required = [f for f in fitting if f[0].name in cand.required]
        if len(required) < len(cand.required):
            return None
        others = [f for f in fitting if f[0].name not in cand.required]
        if self.settings.placement == "frag":
            # best fit first (whole nodes stay whole); among nodes as full, the one this
            # job keeps busy least past its jobs' expected ends (so a node about to
            # drain still drains: where the next whole-node job starts), then the one
            # where it leaves the fewest GPUs the jobs likely to come could not use
            others.sort(
                key=lambda f: (
                    len(f[1].gpus),
                    _extension(f[0], at, job_end),
                    self.frag.delta(f[1], shape),
                    f[1].cpus,
                    f[1].mem,
                    f[0].index,
                )
            )
        elif self.settings.placement == "pack":
            # best fit: the fullest node that still fits, so whole nodes stay free
            others.sort(key=lambda f: (len(f[1].gpus), f[1].cpus, f[1].mem, f[0].index))
        else:
            others.sort(key=lambda f: f[0].index)
        return (required + others)[: max(shape.nodes, len(required))]

    def start(
        self,
        req: JobRequest,
        shape: Shape,
        cand: _Candidate,
        chosen: list[tuple[NodeProfile, Avail]],
        duration: float,
        limit: float,
        on_prediction: bool = False,
    ) -> None:
        placements = []
        end = self.now + duration
        for node, avail in chosen:
            if req.exclusive:
                cpus, mem = node.view.cpus_total, node.free_mem
                gpus = tuple(sorted(node.free_gpus))
            else:
                cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                gpus = _pick_gpus(avail.gpus, shape.gpus_per_node)
            before = len(node.free_gpus)
            node.take_now(cpus, mem, gpus, end, req.job_id, self.now + limit)
            if len(node.free_gpus) != before:
                del self.buckets[before][node.name]
                self.buckets[len(node.free_gpus)][node.name] = node
            placements.append(Placement(node.name, cpus, mem, gpus))
        self.starts.append(Start(req.job_id, cand.partition.name, tuple(placements), on_prediction))
        key = (req.qos, req.user)
        self.user_jobs[key] = self.user_jobs.get(key, 0) + 1
        self.limits.start(req, shape)
        self.profile_version += 1

    # ------------------------------------------------------------ preemption

    def try_preempt(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[_Candidate],
        duration: float,
        expected: float,
    ) -> bool:
        """Preempt for ``req`` if its QOS allows and that lets it start (see preempt.py);
        True if it is now taken care of (preempting, or waiting on its claim)."""
        claim = self.claims.get(req.job_id)
        if claim is not None:  # its victims are still leaving: it waits for them only
            self.reasons[req.job_id] = RESOURCES
            nodes = tuple(dict.fromkeys(p.node for p in claim.placements))
            ends = [self.nodes[n].releases for n in nodes if n in self.nodes]
            start = max(
                (r.end for rs in ends for r in rs if r.job_id in claim.victims), default=self.now
            )
            self.forecasts[req.job_id] = Forecast(
                req.job_id, start, claim.partition, nodes, True, tuple(sorted(claim.victims))
            )
            return True
        if (req.qos or "normal") not in self.may_preempt:
            return False
        if req.reservation:
            return False  # a reservation's resources are its own already
        usable = [c for c in candidates if self.now >= c.not_before]
        key: tuple[object, ...] = (req.qos or "normal", shape, req.gpu_type, req.exclusive)
        key += (req.nodelist, req.exclude, tuple(c.partition.name for c in usable))
        key += (duration, expected)
        if key in self.no_preempt or self.preempt_searches >= MAX_PREEMPT_SEARCHES:
            return False
        self.preempt_searches += 1
        names = {n for c in usable for n in c.members}
        own = req.qos or "normal"
        if own not in self.pools:
            self.pools[own] = preempt.pool(
                own, self.snap.running, self.qos, self.may_preempt, set()
            )
        rank: dict[int, int] = {}  # lower: preempted sooner
        on_node: dict[str, list[int]] = {}
        for i, v in enumerate(self.pools[own]):
            if v.job_id in self.preempted:
                continue
            rank[v.job_id] = i
            for p in v.placements:
                if p.node in names:
                    on_node.setdefault(p.node, []).append(v.job_id)
        for cand in usable:
            found = self.fit_freed(req, shape, cand, duration, expected, on_node, rank)
            if found is not None:
                self.preempt(req, shape, cand, *found)
                return True
        self.no_preempt.add(key)
        return False

    def fit_freed(
        self,
        req: JobRequest,
        shape: Shape,
        cand: _Candidate,
        duration: float,
        expected: float,
        on_node: dict[str, list[int]],
        rank: dict[int, int],
    ) -> tuple[list[tuple[NodeProfile, Avail]], frozenset[int]] | None:
        """The nodes of ``cand`` where ``req`` would fit now for its whole limit, and the
        victims to preempt there: on each node the fewest, lowest ones it needs (taken
        lowest first until it fits, then each dropped again, the most valuable first,
        while it still fits); the nodes needing the fewest and lowest victims win."""
        end, job_end = self.now + duration, self.now + expected
        if end > cand.not_after:
            return None

        def fit(node: NodeProfile, victims: list[int]) -> tuple[NodeProfile, Avail] | None:
            trial = preempt.freed(node, frozenset(victims))
            avail = trial.window(self.now, end, cand.ignore, job_end)
            return (trial, avail) if trial.fits(avail, shape, req.exclusive) else None

        def sums(node: NodeProfile) -> dict[int, tuple[int, int, int]]:
            # what each job gives back on this node (GPU sets of jobs never overlap)
            out: dict[int, tuple[int, int, int]] = {}
            for r in node.releases:
                c, m, g = out.get(r.job_id, (0, 0, 0))
                out[r.job_id] = (c + r.cpus, m + r.mem, g + len(r.gpus))
            return out

        def victims_on(node: NodeProfile, here: list[int]) -> list[int] | None:
            """The fewest, lowest victims on ``node`` that let ``req`` fit there."""
            if node.holds or req.exclusive:
                # reservations or an empty node to find: the exact (slower) check
                chosen: list[int] = []
                ok = fit(node, chosen) is not None
                for victim in here:
                    if ok:
                        break
                    chosen.append(victim)
                    ok = fit(node, chosen) is not None
                if not ok:
                    return None
                for victim in reversed(list(chosen)):  # the most valuable first
                    rest = [v for v in chosen if v != victim]
                    if fit(node, rest) is not None:
                        chosen = rest
                return chosen
            # a node without holds: free now plus what the victims hold, summed up
            give = sums(node)
            need = (shape.cpus_per_node, shape.mem_per_node_mb, shape.gpus_per_node)
            have = [node.free_cpus, node.free_mem, len(node.free_gpus)]
            chosen = []
            for victim in here:
                if all(h >= n for h, n in zip(have, need, strict=True)):
                    break
                chosen.append(victim)
                have = [h + g for h, g in zip(have, give[victim], strict=True)]
            if not all(h >= n for h, n in zip(have, need, strict=True)):
                return None
            for victim in reversed(list(chosen)):  # the most valuable first
                less = [h - g for h, g in zip(have, give[victim], strict=True)]
                if all(h >= n for h, n in zip(less, need, strict=True)):
                    chosen.remove(victim)
                    have = less
            return chosen

        options: list[tuple[tuple[int, int], NodeProfile, list[int]]] = []
        # nodes by their lowest victim: once enough nodes need one victim each, a node
        # whose lowest victim ranks above theirs cannot do better (one victim, higher)
        order = sorted(
            cand.nodes,
            key=lambda n: (rank[on_node[n.name][0]] if n.name in on_node else -1, n.index),
        )
        singles: list[int] = []
        for node in order:
            here = on_node.get(node.name, [])
            if not here and shape.nodes == 1 and node.name not in cand.required:
                continue  # it did not fit here when it tried to start: still does not
            if (
                here
                and not cand.required
                and len(singles) >= shape.nodes
                and rank[here[0]] > sorted(singles)[shape.nodes - 1]
            ):
                break
            chosen = victims_on(node, here)
            if chosen is not None:
                cost = (len(chosen), max((rank[v] for v in chosen), default=-1))
                options.append((cost, node, chosen))
                if len(chosen) == 1:
                    singles.append(cost[1])
        required = [o for o in options if o[1].name in cand.required]
        if len(required) < len(cand.required):
            return None
        others = sorted(
            (o for o in options if o[1].name not in cand.required),
            key=lambda o: (o[0], o[1].index),
        )
        picked = (required + others)[: max(shape.nodes, len(required))]
        if len(picked) < shape.nodes:
            return None
        placed = [fit(node, chosen) for _, node, chosen in picked]
        if any(p is None for p in placed):
            return None  # (the sums agree with the exact check: a safeguard only)
        victims = frozenset(v for o in picked for v in o[2])
        if not victims:
            return None  # it fits without preempting anything: not a case for preemption
        return [p for p in placed if p is not None], victims

    def preempt(
        self,
        req: JobRequest,
        shape: Shape,
        cand: _Candidate,
        chosen: list[tuple[NodeProfile, Avail]],
        victims: frozenset[int],
    ) -> None:
        owner = preempt.claim_owner(req.job_id)
        placements = []
        for trial, avail in chosen:
            node = self.nodes[trial.name]
            if req.exclusive:
                cpus, mem = node.view.cpus_total, node.view.mem_total_mb
                gpus = tuple(sorted(node.all_gpus))
            else:
                cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                gpus = _pick_gpus(avail.gpus, shape.gpus_per_node)
            for hold in preempt.claim_holds(node, owner, cpus, mem, gpus, victims, self.now):
                node.hold(hold)
            placements.append(Placement(node.name, cpus, mem, gpus))
        self.profile_version += 1
        self.preempted |= victims
        self.preemptions.append(
            Preemption(req.job_id, cand.partition.name, tuple(placements), tuple(sorted(victims)))
        )
        self.reasons[req.job_id] = RESOURCES
        nodes = tuple(p.node for p in placements)
        start = max(preempt.victims_end(self.nodes[n], victims, self.now) for n in nodes)
        self.forecasts[req.job_id] = Forecast(
            req.job_id, start, cand.partition.name, nodes, True, tuple(sorted(victims))
        )

    # ------------------------------------------------------------ later

    def blocked(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[_Candidate],
        duration: float,
        expected: float,
    ) -> None:
        later = self.later.get(req.klass)
        if (
            later is not None
            and req.job_id not in self.starving
            and self.reserved >= self.settings.reserve_depth
            and self.forecasted >= self.settings.forecast_depth
        ):
            self.reasons[req.job_id] = later  # what blocked() below would decide
            return
        queued_behind = any(c.partition.name in self.blocked_partitions for c in candidates)
        waiting_for_resv = all(self.now < c.not_before for c in candidates)
        self.blocked_partitions.update(c.partition.name for c in candidates)
        if not self.settings.backfill:
            self.fcfs_blocked = True
        reserve = self.reserved < self.settings.reserve_depth
        if reserve or self.forecasted < self.settings.forecast_depth:
            forecast = self.earliest(req, shape, candidates, duration, expected, reserve)
            if forecast is not None:
                self.forecasts[req.job_id] = forecast
                if reserve:
                    self.reserved += 1
                else:
                    self.forecasted += 1
        if waiting_for_resv:
            self.reasons[req.job_id] = RESERVATION
        elif queued_behind:
            self.reasons[req.job_id] = PRIORITY
        else:
            self.reasons[req.job_id] = RESOURCES
        # its class-mates queue behind it: their partitions are blocked from now on
        self.later[req.klass] = RESERVATION if waiting_for_resv else PRIORITY

    def earliest(
        self,
        req: JobRequest,
        shape: Shape,
        candidates: list[_Candidate],
        duration: float,
        expected: float,
        reserve: bool,
    ) -> Forecast | None:
        best: tuple[float, _Candidate, list[tuple[NodeProfile, Avail]]] | None = None
        # a starving job's start is planned as EASY plans it: every job running to its limit
        limits = req.job_id in self.starving
        for cand in candidates:
            found = self.earliest_in(req, shape, cand, duration, expected, limits)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], cand, found[1])
        if best is None:
            return None
        t, cand, chosen = best
        shown = t
        if limits and self.predict:
            # what it is told is still the likely start, by the predictions
            likely = [self.earliest_in(req, shape, c, duration, expected) for c in candidates]
            shown = min([t] + [found[0] for found in likely if found is not None])
        waits_for = sorted(
            {
                r.job_id
                for node, _ in chosen
                for r in node.releases
                if self.now < r.end <= t and r.job_id > 0
            }
        )
        if reserve:
            for node, avail in chosen:
                if req.exclusive:
                    cpus, mem, gpus = node.view.cpus_total, node.view.mem_total_mb, node.all_gpus
                else:
                    cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                    gpus = frozenset(_pick_gpus(avail.gpus, shape.gpus_per_node))
                # a starving job's hold is kept against the others' limits, so no wrong
                # prediction can push it back ("guard:"); the rest's against predictions
                kind = "guard" if req.job_id in self.starving else "job"
                node.hold(Hold(t, t + expected, cpus, mem, gpus, owner=f"{kind}:{req.job_id}"))
            self.profile_version += 1
        return Forecast(
            job_id=req.job_id,
            start=shown,
            partition=cand.partition.name,
            nodes=tuple(n.name for n, _ in chosen),
            reserved=reserve,
            waits_for=tuple(waits_for),
        )

    def earliest_in(
        self,
        req: JobRequest,
        shape: Shape,
        cand: _Candidate,
        duration: float,
        expected: float,
        limits: bool = False,
    ) -> tuple[float, list[tuple[NodeProfile, Avail]]] | None:
        key: tuple[object, ...] = (cand.partition.name, shape, req.gpu_type, req.exclusive)
        key += (cand.required, req.exclude, cand.ignore, duration, expected, limits)
        cached = self.forecast_cache.get(key)
        if cached is not None and cached[0] == self.profile_version and cached[1] is not None:
            hit = cached[1]
            end, job_end = hit.start + duration, hit.start + expected
            return hit.start, [
                (
                    self.nodes[n],
                    self.nodes[n].window(hit.start, end, cand.ignore, job_end, limits),
                )
                for n in hit.nodes
            ]
        if cached is not None and cached[0] == self.profile_version:
            return None
        result = self._search(req, shape, cand, duration, expected, limits)
        if result is None:
            self.forecast_cache[key] = (self.profile_version, None)
        else:
            names = tuple(n.name for n, _ in result[1])
            self.forecast_cache[key] = (
                self.profile_version,
                Forecast(req.job_id, result[0], cand.partition.name, names, False),
            )
        return result

    def _search(
        self,
        req: JobRequest,
        shape: Shape,
        cand: _Candidate,
        duration: float,
        expected: float,
        limits: bool = False,
    ) -> tuple[float, list[tuple[NodeProfile, Avail]]] | None:
        # Walk the instants where something frees up; between them nothing can change,
        # except on nodes with holds (a sliding window may reach a hold's start).
        events: dict[float, list[NodeProfile]] = {}
        for node in cand.nodes:
            for r in node.releases:
                end = r.last if limits else r.end
                if end > self.now and end != INFINITY:
                    events.setdefault(end, []).append(node)
            for h in node.holds:
                if h.end > self.now and h.end != INFINITY:
                    events.setdefault(h.end, []).append(node)
        first = max(self.now, cand.not_before)
        times = sorted(t for t in events if t > first)
        with_holds = [n for n in cand.nodes if n.holds]
        fitting: dict[str, tuple[NodeProfile, Avail]] = {}

        def check(nodes: Iterable[NodeProfile], t: float) -> None:
            for node in nodes:
                if not req.exclusive and not node.may_fit_at(t, shape, limits):
                    fitting.pop(node.name, None)  # holds only take away: no fit either
                    continue
                avail = node.window(t, t + duration, cand.ignore, t + expected, limits)
                if node.fits(avail, shape, req.exclusive):
                    fitting[node.name] = (node, avail)
                else:
                    fitting.pop(node.name, None)

        check(cand.nodes, first)
        for t in [first, *times]:
            if t != first:
                check(events[t], t)
                check(with_holds, t)
            if t + duration > cand.not_after:
                return None
            chosen = self.choose(list(fitting.values()), shape, cand, t, t + expected)
            if chosen is not None:
                return t, chosen
        return None


def starving_first(
    pending: tuple[JobRequest, ...], cutoff: float
) -> tuple[tuple[JobRequest, ...], frozenset[int]]:
    """The queue with the longest waiter moved to its front if it has been eligible
    since ``cutoff`` or earlier, and its id: the starvation guard. Priority (fair-share
    above all) and shortest-first backfill may pass a job over for days; past the
    threshold the oldest job gets the reservation as FCFS would give it, kept against
    the limits of the jobs backfilled around it. The others keep their order (moving
    them all ahead cost more slowdown for no shorter longest wait)."""
    oldest = min(
        (r for r in pending if not r.blocked_reason),
        key=lambda r: (r.eligible_time or r.submit_time, r.job_id),
        default=None,
    )
    if oldest is None or (oldest.eligible_time or oldest.submit_time) > cutoff:
        return pending, frozenset()
    return (oldest, *(r for r in pending if r is not oldest)), frozenset((oldest.job_id,))


def _extension(node: NodeProfile, at: float, job_end: float) -> float:
    """How much later ``node`` would be wholly free with a job from ``at`` to
    ``job_end`` on it than it will be anyway (its jobs' expected ends)."""
    busy_until = max((r.end for r in node.releases if r.end > at), default=at)
    for h in node.holds:
        if h.start <= at < h.end:
            busy_until = max(busy_until, h.end)
    return 0.0 if job_end <= busy_until else job_end - busy_until


def _pick_gpus(available: frozenset[int], count: int) -> tuple[int, ...]:
    return tuple(sorted(available)[:count])


def schedule(snapshot: Snapshot) -> Plan:
    """The plan for ``snapshot``: what starts now, and what every blocked job waits for."""
    return _Pass(snapshot).run()
