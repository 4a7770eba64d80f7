"""What a job asks of a pass: its shape, where it could run, for how long.

``Asks`` turns a pending request into an ``Ask`` (or the reason it has none): the
admission limits first, then its durations and its candidate nodes in each partition
it names (static node facts only, so computed once per pass for each distinct need).
An ``Ask`` is the one value the pass's stages read (placing, preempting,
forecasting), given with the request it is for. It depends on nothing of the request
but its class (``JobRequest.klass``), so the class-mates of a job that found no start
are handed that job's Ask; a job with a claim (a preemptor's, or a requeued job's on
its healthy nodes) is the exception (its candidates ignore its claim's holds), and is
never a class-mate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from corral.reasons import UNAVAILABLE_NODES as NODES_NAMED
from corral.reasons import Reason
from ctld.sched import preempt, reclaim
from ctld.sched.availability import Availability, NodeSeq
from ctld.sched.limits import Admission
from ctld.sched.model import INFINITY, JobRequest, PartitionView, Snapshot
from ctld.sched.profile import NodeProfile, could_ever_fit
from ctld.sched.shape import Shape, job_shape

# Slurm's pending reasons the core decides (the one list: corral/reasons.py)
RESOURCES = Reason.RESOURCES
PRIORITY = Reason.PRIORITY
PARTITION_DOWN = Reason.PARTITION_DOWN
PARTITION_INACTIVE = Reason.PARTITION_INACTIVE
PARTITION_TIME_LIMIT = Reason.PARTITION_TIME_LIMIT
PARTITION_NODE_LIMIT = Reason.PARTITION_NODE_LIMIT
REQ_NODE_NOT_AVAIL = Reason.REQ_NODE_NOT_AVAIL
NODES_DOWN = Reason.NODES_DOWN
RESERVATION = Reason.RESERVATION
BAD_CONSTRAINTS = Reason.BAD_CONSTRAINTS
QOS_MAX_JOBS_PER_USER = Reason.QOS_MAX_JOBS_PER_USER
UNAVAILABLE_NODES = NODES_NAMED  # + the nodes

# a candidate's node names and the set of them, or the reason it has none
Found = tuple[tuple[str, ...], frozenset[str]] | str


@dataclass(frozen=True)
class Candidate:
    """A partition where a job could run, and its nodes there that could ever hold it."""

    partition: PartitionView
    nodes: Sequence[NodeProfile]  # made as they are reached (availability.py)
    required: frozenset[str]  # -w nodes the allocation must include
    ignore: str  # the job's own reservation, which its holds do not block
    not_before: float  # a reservation's start
    not_after: float  # a reservation's end
    members: frozenset[str] = frozenset()  # names of ``nodes``


@dataclass(frozen=True, slots=True)
class Ask:
    shape: Shape
    candidates: tuple[Candidate, ...]  # in the order of the job's partitions
    duration: float  # its time limit (INFINITY: none)
    expected: float  # what the plan expects it to run: its prediction, or ``duration``


class Asks:
    """Each pending job's Ask, or the reason it waits without one."""

    def __init__(
        self,
        snap: Snapshot,
        avail: Availability,
        admission: Admission,
        claimed: frozenset[int],
        reclaiming: frozenset[int] = frozenset(),
    ) -> None:
        self.now = snap.now
        self.predict = snap.settings.predict
        self.partitions = {p.name: p for p in snap.partitions}
        self.reservations = {r.name: r for r in snap.reservations}
        self.nodes = avail.nodes
        self.views, self.position = avail.views, avail.index.position
        # the candidates without a reservation, kept with the node index (nodeindex.py)
        self.kept: dict[tuple[object, ...], tuple[object, Found]] = avail.index.candidates  # type: ignore[assignment]
        self.admission = admission
        self.claimed = claimed
        self.reclaiming = reclaiming
        self.candidates: dict[tuple[object, ...], Candidate | str] = {}

    def of(self, req: JobRequest) -> Ask | str:
        """Its Ask, or the reason it has none (the limits, then its partitions)."""
        shape = job_shape(req)
        refused = self.admission.refusal(req, shape)
        if refused:  # a limit: it waits without anything held back for it
            return refused
        duration, expected = self.durations(req)
        candidates: list[Candidate] = []
        reason: str = RESOURCES
        for part_name in req.partitions:
            cand_or_reason = self.candidate(req, shape, part_name)
            if isinstance(cand_or_reason, str):
                reason = cand_or_reason
                continue
            candidates.append(cand_or_reason)
        if not candidates:
            return reason
        if req.job_id in self.claimed:  # what was freed for it is its own
            owner = preempt.claim_owner(req.job_id)
            candidates = [dataclasses.replace(c, ignore=owner) for c in candidates]
        elif req.job_id in self.reclaiming:  # so are the nodes its last run kept
            owner = reclaim.owner(req.job_id)
            candidates = [dataclasses.replace(c, ignore=owner) for c in candidates]
        return Ask(shape, tuple(candidates), duration, expected)

    def durations(self, req: JobRequest) -> tuple[float, float]:
        """(its limit, what the plan expects it to run): the prediction when planning
        with predictions, never more than the limit."""
        duration = INFINITY if req.time_limit_s < 0 else float(max(req.time_limit_s, 1))
        if self.predict and req.predicted_s > 0:
            return duration, min(float(req.predicted_s), duration)
        return duration, duration

    def candidate(self, req: JobRequest, shape: Shape, part_name: str) -> Candidate | str:
        part = self.partitions.get(part_name)
        # DRAIN refuses new submissions (at submit) but still runs its queue; DOWN and
        # INACTIVE keep their queue waiting, each with its own reason (as Slurm's)
        if part is None or part.state not in ("UP", "DRAIN"):
            return (
                PARTITION_INACTIVE
                if part is not None and part.state == "INACTIVE"
                else PARTITION_DOWN
            )
        if part.max_time_s >= 0 and (req.time_limit_s < 0 or req.time_limit_s > part.max_time_s):
            return PARTITION_TIME_LIMIT
        if part.max_nodes and shape.nodes > part.max_nodes:
            return PARTITION_NODE_LIMIT
        # everything below depends on static node facts only: computed once per pass
        # for each distinct (partition, shape, constraints)
        key = (
            part_name,
            shape,
            req.gpu_type,
            req.nodelist,
            req.exclude,
            req.reservation,
            req.features,
        )
        cached = self.candidates.get(key)
        if cached is None:
            cached = self._candidate(req, shape, part)
            self.candidates[key] = cached
        return cached

    def _candidate(self, req: JobRequest, shape: Shape, part: PartitionView) -> Candidate | str:
        ignore, not_before, not_after = "", self.now, INFINITY
        allowed: set[str] | None = None
        if req.reservation:
            resv = self.reservations.get(req.reservation)
            if resv is None or resv.end <= self.now:
                return RESERVATION
            ignore, not_before, not_after = f"resv:{resv.name}", resv.start, resv.end
            allowed = set(resv.nodes)
            found = self._nodes_of(req, shape, part, allowed)
        else:
            # without a reservation, static node facts only: kept between passes by the
            # node index (a new index when any of them changes)
            key = (id(part.nodes), shape, req.gpu_type, req.nodelist, req.exclude, req.features)
            kept = self.kept.get(key)
            if kept is not None and kept[0] is part.nodes:
                found = kept[1]
            else:
                found = self._nodes_of(req, shape, part, None)
                # each entry may hold a partition's worth of names: a few hundred needs
                # at most (more: they are made again, as they were in every pass)
                if len(self.kept) >= 256:
                    self.kept.clear()
                self.kept[key] = (part.nodes, found)
        if isinstance(found, str):
            return found
        names, usable = found
        return Candidate(
            part,
            NodeSeq(names, self.nodes),
            frozenset(req.nodelist),
            ignore,
            not_before,
            not_after,
            usable,
        )

    def _nodes_of(
        self, req: JobRequest, shape: Shape, part: PartitionView, allowed: set[str] | None
    ) -> Found:
        """``part``'s nodes that could ever hold ``shape`` for ``req`` (by their views:
        no profile is made), or the reason there are not enough."""
        members = set(part.nodes)
        required = frozenset(req.nodelist)
        if not required <= members or (allowed is not None and not required <= allowed):
            return REQ_NODE_NOT_AVAIL
        views, position = self.views, self.position
        present = [views[i] for name in part.nodes if (i := position.get(name)) is not None]
        excluded = set(req.exclude)
        if req.features:
            featured = {v.name for v in present if v.features.issuperset(req.features)}
            if not featured:  # none, even down: nothing would do (Slurm's BadConstraints)
                return BAD_CONSTRAINTS
            excluded |= members - featured
        nodes: list[str] = []
        down: list[str] = []
        for v in present:
            name = v.name
            if (
                name not in excluded
                and (allowed is None or name in allowed)
                and could_ever_fit(v, shape, req.gpu_type)
            ):
                (nodes if v.schedulable else down).append(name)
        usable = frozenset(nodes)
        # down or drained nodes that would otherwise do: Slurm names the required ones
        if not required <= usable:
            unavailable = [n for n in down if n in required]
            return _unavailable(unavailable) if unavailable else REQ_NODE_NOT_AVAIL
        if len(nodes) < shape.nodes:
            if down and len(nodes) + len(down) >= shape.nodes:
                return NODES_DOWN  # it would fit but for them (Slurm's words)
            return REQ_NODE_NOT_AVAIL if required or allowed is not None else RESOURCES
        if len(nodes) == len(present) and allowed is None:
            # every node of the partition (the usual need): one copy, shared by all
            full = self.kept.get(("all", id(part.nodes)))
            if full is not None and full[0] is part.nodes and full[1][0] == tuple(nodes):
                return full[1]
            shared: Found = (tuple(nodes), usable)
            self.kept[("all", id(part.nodes))] = (part.nodes, shared)
            return shared
        return tuple(nodes), usable


def _unavailable(names: list[str]) -> str:
    """Slurm's reason when nodes the job requires (-w) are down or drained (ctld prints
    the names as a compressed hostlist)."""
    return UNAVAILABLE_NODES + ",".join(names)
