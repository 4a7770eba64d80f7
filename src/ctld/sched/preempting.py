"""Preempting for a job: whether its QOS may, the fewest and lowest victims on the nodes
that then fit it, the claim on what they free, and its forecast."""

from __future__ import annotations

from ctld.sched import preempt
from ctld.sched.ask import Ask, Candidate
from ctld.sched.availability import Availability
from ctld.sched.model import Forecast, JobRequest, Placement, Preemption, RunningView, Snapshot
from ctld.sched.placing import pick_gpus
from ctld.sched.profile import Avail, NodeProfile


class Preemptor:
    """A pass's preemptions: the victims that let a job start now (see preempt.py), and
    the claims of earlier passes (what was freed for a preemptor is its own)."""

    def __init__(self, snap: Snapshot, avail: Availability, max_searches: int) -> None:
        self.now = snap.now
        self.running = snap.running
        self.avail = avail
        self.max_searches = max_searches  # searches per pass (each looks at every node)
        # who may preempt whom, the claims of earlier passes, and the jobs already
        # being preempted (their end is their preemption's deadline)
        self.qos = {q.name: q for q in snap.qos}
        self.may_preempt = preempt.targets(snap.qos)
        self.claims = {c.job_id: c for c in snap.claims}
        self.claimed = frozenset(self.claims)
        self.preempted: set[int] = {v for c in snap.claims for v in c.victims}
        self.preemptions: list[Preemption] = []
        # needs that found nothing to preempt: a pass only takes resources and victims
        # away, so they find nothing later in it either
        self.no_preempt: set[tuple[object, ...]] = set()
        self.pools: dict[str, list[RunningView]] = {}  # by preemptor QOS, lowest first
        self.searches = 0

    def preempt_for(self, req: JobRequest, ask: Ask) -> Forecast | None:
        """``req``'s forecast if it is taken care of by preemption (it preempts now, or
        waits on the claim of an earlier pass: either way its reason is Resources);
        None if its QOS may not, or that would not let it start."""
        claim = self.claims.get(req.job_id)
        nodes_of = self.avail.nodes
        if claim is not None:  # its victims are still leaving: it waits for them only
            nodes = tuple(dict.fromkeys(p.node for p in claim.placements))
            ends = [nodes_of[n].releases for n in nodes if n in nodes_of]
            start = max(
                (r.end for rs in ends for r in rs if r.job_id in claim.victims), default=self.now
            )
            return Forecast(
                req.job_id, start, claim.partition, nodes, True, tuple(sorted(claim.victims))
            )
        shape = ask.shape
        if (req.qos or "normal") not in self.may_preempt or shape.shards_per_node:
            return None  # (shard jobs do not preempt: not built)
        if req.reservation:
            return None  # a reservation's resources are its own already
        usable = [c for c in ask.candidates if self.now >= c.not_before]
        key: tuple[object, ...] = (req.qos or "normal", shape, req.gpu_type, req.exclusive)
        key += (req.nodelist, req.exclude, tuple(c.partition.name for c in usable))
        key += (ask.duration, ask.expected)
        if key in self.no_preempt or self.searches >= self.max_searches:
            return None
        self.searches += 1
        names = {n for c in usable for n in c.members}
        own = req.qos or "normal"
        if own not in self.pools:
            self.pools[own] = preempt.pool(own, self.running, self.qos, self.may_preempt, set())
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
            found = self.fit_freed(req, ask, cand, on_node, rank)
            if found is not None:
                return self._preempt(req, ask, cand, *found)
        self.no_preempt.add(key)
        return None

    def fit_freed(
        self,
        req: JobRequest,
        ask: Ask,
        cand: Candidate,
        on_node: dict[str, list[int]],
        rank: dict[int, int],
    ) -> tuple[list[tuple[NodeProfile, Avail]], frozenset[int]] | None:
        """The nodes of ``cand`` where ``req`` would fit now for its whole limit, and the
        victims to preempt there: on each node the fewest, lowest ones it needs (taken
        lowest first until it fits, then each dropped again, the most valuable first,
        while it still fits); the nodes needing the fewest and lowest victims win."""
        shape = ask.shape
        end, job_end = self.now + ask.duration, self.now + ask.expected
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

    def _preempt(
        self,
        req: JobRequest,
        ask: Ask,
        cand: Candidate,
        chosen: list[tuple[NodeProfile, Avail]],
        victims: frozenset[int],
    ) -> Forecast:
        shape = ask.shape
        owner = preempt.claim_owner(req.job_id)
        placements = []
        for trial, avail in chosen:
            node = self.avail.nodes[trial.name]
            if req.exclusive:
                cpus, mem = node.view.cpus_total, node.view.mem_total_mb
                gpus = tuple(sorted(node.all_gpus))
            else:
                cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                gpus = pick_gpus(avail.gpus, shape.gpus_per_node)
            for hold in preempt.claim_holds(node, owner, cpus, mem, gpus, victims, self.now):
                self.avail.hold(node, hold)
            placements.append(Placement(node.name, cpus, mem, gpus))
        self.preempted |= victims
        self.preemptions.append(
            Preemption(req.job_id, cand.partition.name, tuple(placements), tuple(sorted(victims)))
        )
        nodes = tuple(p.node for p in placements)
        nodes_of = self.avail.nodes
        start = max(preempt.victims_end(nodes_of[n], victims, self.now) for n in nodes)
        return Forecast(req.job_id, start, cand.partition.name, nodes, True, tuple(sorted(victims)))
