"""The state of one scheduling pass, shared by its parts (see backfill.py).

Built from the snapshot alone: every node's profile (what frees up when, what is held
for whom), the plan's starts, reasons and forecasts as they are decided, and the
per-pass caches.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.reasons import Reason
from ctld.sched import preempt
from ctld.sched.frag import Fragmentation, pending_demands
from ctld.sched.limits import LimitTracker
from ctld.sched.model import Forecast, PartitionView, Preemption, RunningView, Snapshot, Start
from ctld.sched.predict import expected_end
from ctld.sched.profile import Hold, NodeProfile, Release
from ctld.sched.shape import Shape

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


Prepared = tuple[Shape, list["Candidate"], float, float]


@dataclass(frozen=True)
class Candidate:
    partition: PartitionView
    nodes: tuple[NodeProfile, ...]
    required: frozenset[str]  # -w nodes the allocation must include
    ignore: str  # the job's own reservation, which its holds do not block
    not_before: float  # a reservation's start
    not_after: float  # a reservation's end
    members: frozenset[str] = frozenset()  # names of ``nodes``


class PassState:
    """What a pass knows and has decided so far: the nodes' profiles (running jobs' releases,
    reservations' and claims' holds), the caches that spare repeated work, and the plan
    being built. The parts of the pass (placing, preempting, forecasting, backfill) are
    its subclasses."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.settings = snap.settings
        self.nodes = {v.name: NodeProfile.from_view(v, i) for i, v in enumerate(snap.nodes)}
        for profile in self.nodes.values():
            profile.clock = self.now
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
                if node is None:
                    continue
                if p.shards and p.gpu_indices:
                    # its shards come back at its end; the GPU, when its last sharer's do
                    whole = frozenset(p.gpu_indices[1:])
                    node.releases.append(
                        Release(end, p.cpus, p.mem_mb, whole, run.job_id, limit_end)
                    )
                    node.share_until(p.gpu_indices[0], end, limit_end)
                else:
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
        self.candidates: dict[tuple[object, ...], Candidate | str] = {}
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
        # forecasts made once the pass's starts are all decided hold their slot, so
        # that each later forecast queues behind them (never changes a start)
        self.stacking = False
        self.stacked = 0
        self.blocked_partitions: set[str] = set()
        self.fcfs_blocked = False
        # classes (JobRequest.klass) that failed to start in this pass: the reason its
        # prepare gave (None: prepared, then found no room), and what blocked() needs
        self.dead: dict[int, tuple[str, Prepared | None, Shape]] = {}
        # the reason a class's later blocked jobs get once no forecast is left to make
        self.later: dict[int, str] = {}
        self.tests = 0  # full tries that started nothing, against settings.max_job_test
        self.max_tests = snap.settings.max_job_test
        self.starving: frozenset[int] = frozenset()  # past the starvation guard's threshold
