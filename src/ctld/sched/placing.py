"""Placing a job now: the nodes of its candidates where it fits for its whole time limit
without touching a hold, the best of them by the placement policy, and its start. The
policy's choice among nodes that fit (``choose``) is the forecaster's too."""

from __future__ import annotations

import random

from ctld.sched.ask import Ask, Candidate
from ctld.sched.availability import Availability
from ctld.sched.frag import Fragmentation, State, pending_demands
from ctld.sched.model import INFINITY, JobRequest, Placement, Snapshot, Start
from ctld.sched.profile import Avail, NodeProfile
from ctld.sched.shape import Shape


class Placer:
    """Where a job fits now, and the nodes the placement policy gives it."""

    def __init__(self, snap: Snapshot, avail: Availability) -> None:
        self.now = snap.now
        self.policy = snap.settings.placement
        self.seed = snap.version
        self.avail = avail
        self.frag = Fragmentation(snap.demands or pending_demands(snap))
        # (partition, shape, ...) that found no room now: none later in the pass either
        self.no_fit_now: set[tuple[object, ...]] = set()
        self.placed = 0  # starts made so far: part of the "random" policy's seed

    def start_now(self, req: JobRequest, ask: Ask) -> Start | None:
        """``req``'s start, on the first of its candidates where it fits now (the nodes
        taken), or None."""
        shape, duration, expected = ask.shape, ask.duration, ask.expected
        for cand in ask.candidates:
            if self.now < cand.not_before:
                continue
            chosen = self.fit_now(req, ask, cand)
            if chosen is not None:
                # whether it fits only by its prediction (not to its limit)
                relied = expected < duration and any(
                    node.holds
                    and not node.fits(
                        node.window(self.now, self.now + duration, cand.ignore, shared=True),
                        shape,
                        req.exclusive,
                    )
                    for node, _ in chosen
                )
                return self._start(req, ask, cand, chosen, relied)
        return None

    def fit_now(
        self, req: JobRequest, ask: Ask, cand: Candidate
    ) -> list[tuple[NodeProfile, Avail]] | None:
        shape, duration, expected = ask.shape, ask.duration, ask.expected
        # the same shape that found no room now finds none later in this pass either:
        # a pass only ever takes resources away from "now"
        key: tuple[object, ...] = (cand.partition.name, shape, req.gpu_type, req.exclusive)
        key += (cand.required, req.exclude, cand.ignore, req.spares_ok)
        if key in self.no_fit_now:
            return None
        end = self.now + duration
        if end > cand.not_after:
            return None
        # advance reservations are kept against the limit, the reserved jobs ahead
        # against the prediction (a wrong one can delay them, never an advance one)
        job_end = self.now + expected
        shards = shape.shards_per_node
        spares = self.spares(cand) if not req.spares_ok else frozenset()
        if (
            self.policy == "pack"
            and not req.exclusive
            and not cand.required
            and not shards
            and not req.prefer
            and not spares
        ):
            return self._fit_now_packed(shape, cand, end, job_end, key)
        fitting = []
        free_now = 0
        required_free = 0
        for node in cand.nodes:
            if node.name in spares:  # kept for the jobs a node failure requeued
                continue
            # cheap refusals first: most nodes of a busy cluster are full
            if node.free_cpus < shape.cpus_per_node or len(node.free_gpus) < shape.gpus_per_node:
                continue
            room: tuple[tuple[int, int], ...] = ()
            if node.shard_free:
                room = tuple((g, n) for g, n in sorted(node.shard_free.items()) if n)
            if (
                shards
                and len(node.free_gpus) == shape.gpus_per_node
                and not any(n >= shards for _, n in room)
            ):
                continue
            now_avail = Avail(
                node.free_cpus, node.free_mem, frozenset(node.free_gpus), not node.busy, room
            )
            if not node.fits(now_avail, shape, req.exclusive):
                continue
            free_now += 1
            required_free += node.name in cand.required
            avail = (
                node.window(self.now, end, cand.ignore, job_end, shared=True)
                if node.holds
                else now_avail
            )
            if node.fits(avail, shape, req.exclusive):
                fitting.append((node, avail))
        if free_now < shape.nodes or required_free < len(cand.required):
            self.no_fit_now.add(key)
        return self.choose(fitting, shape, cand, self.now, job_end, req.prefer)

    def spares(self, cand: Candidate) -> frozenset[str]:
        """The partition's hot spares now: its last ``spare_nodes`` idle nodes, but
        those a requeued job claims back (reclaim.py)."""
        count = cand.partition.spare_nodes
        if not count:
            return frozenset()
        claimed = self.avail.reclaimed
        idle = [node.name for node in cand.nodes if not node.busy and node.name not in claimed]
        return frozenset(idle[-count:])

    def _fit_now_packed(
        self, shape: Shape, cand: Candidate, end: float, job_end: float, key: tuple[object, ...]
    ) -> list[tuple[NodeProfile, Avail]] | None:
        fitting: list[tuple[NodeProfile, Avail]] = []
        free_now = 0
        pool = self.avail
        max_gpus, profiles, members = pool.max_gpus, pool.nodes, cand.members
        for free_gpus in range(shape.gpus_per_node, max_gpus + 1):
            for name in pool.bucket(free_gpus):
                if name not in members:
                    continue  # (not looked at: no profile made)
                node = profiles[name]
                if node.free_cpus < shape.cpus_per_node or node.free_mem < shape.mem_per_node_mb:
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
                    if free_gpus == max_gpus and len(fitting) >= shape.nodes:
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
        cand: Candidate,
        at: float = 0.0,
        job_end: float = INFINITY,
        prefer: tuple[str, ...] = (),
    ) -> list[tuple[NodeProfile, Avail]] | None:
        if len(fitting) < shape.nodes:
            return None
        required = [f for f in fitting if f[0].name in cand.required]
        if len(required) < len(cand.required):
            return None
        others = [f for f in fitting if f[0].name not in cand.required]
        policy = self.policy
        if shape.shards_per_node and policy != "firstfit":
            others.sort(key=lambda f: self._shard_key(f[0], f[1], shape, at, job_end))
        elif policy == "fgd":
            # FGD (ATC'23): the node where the job raises the expected fragmentation
            # least, judged on the node as it will be when this job is expected to end:
            # a node whose jobs all end before then is (nearly) whole again, and
            # breaking it costs what breaking a whole node costs. With nothing ending
            # (or no prediction) that is ATC'23's static rule. Then fragmentation now,
            # then best fit
            others.sort(
                key=lambda f: (
                    self.frag.delta(self.horizon_state(f[0], f[1], at, job_end), shape),
                    self.frag.delta(self.frag_state(f[0], f[1]), shape),
                    len(f[1].gpus),
                    f[1].cpus,
                    f[1].mem,
                    f[0].index,
                )
            )
        elif policy == "random":
            others.sort(key=lambda f: f[0].index)
            self.rng().shuffle(others)
        elif policy == "frag":
            # best fit first (whole nodes stay whole); among nodes as full, the one this
            # job keeps busy least past its jobs' expected ends (so a node about to
            # drain still drains: where the next whole-node job starts), then the one
            # where it leaves the fewest GPUs the jobs likely to come could not use
            others.sort(
                key=lambda f: (
                    len(f[1].gpus),
                    _extension(f[0], at, job_end),
                    self.frag.delta(self.frag_state(f[0], f[1]), shape),
                    f[1].cpus,
                    f[1].mem,
                    f[0].index,
                )
            )
        elif policy == "pack":
            # best fit: the fullest node that still fits, so whole nodes stay free
            others.sort(key=lambda f: (len(f[1].gpus), f[1].cpus, f[1].mem, f[0].index))
        else:
            others.sort(key=lambda f: f[0].index)
        if prefer:  # an elastic job's earlier nodes first, in their order (stable)
            rank = {name: i for i, name in enumerate(prefer)}
            others.sort(key=lambda f: rank.get(f[0].name, len(rank)))
        return (required + others)[: max(shape.nodes, len(required))]

    def rng(self, salt: int = 0) -> random.Random:
        """The "random" placement's draw: seeded by the snapshot and the starts so far,
        so that a plan stays a function of its snapshot."""
        return random.Random(self.seed * 1_000_003 + self.placed * 7919 + salt)

    def frag_state(self, node: NodeProfile, avail: Avail) -> State:
        # the shared GPUs a job may join then (at a later instant: none)
        shared = tuple(sorted(n for _, n in avail.room))
        return (avail.cpus, avail.mem, len(avail.gpus), shared, node.shards_per_gpu)

    def horizon_state(self, node: NodeProfile, avail: Avail, at: float, job_end: float) -> State:
        """``node`` as fragmentation sees it when a job placed at ``at`` is expected to
        end (``job_end``): what is free then, besides the job; shared GPUs still shared
        keep their shards left now (a shared GPU whose sharers all end by then is
        whole again)."""
        if job_end <= at or job_end == INFINITY or not node.releases:
            return self.frag_state(node, avail)
        then = node.window(job_end, job_end + 1.0)
        shared = tuple(sorted(n for g, n in avail.room if g not in then.gpus))
        return (then.cpus, then.mem, len(then.gpus), shared, node.shards_per_gpu)

    def shard_choice(
        self, node: NodeProfile, avail: Avail, shape: Shape
    ) -> tuple[int, int, bool, float]:
        """The GPU a shard job takes on ``node``: (its index, the shards it has left
        after, whether it is a free GPU turned shared, the fragmentation it adds under
        "fgd", else 0). "firstfit": the lowest index with room; "random": any with
        room; else best fit (the shared GPU with the fewest shards left that fit, else
        a free GPU to share) or, under "fgd", the GPU (shared, or a free one) that
        least raises the fragmentation."""
        k = shape.shards_per_node
        policy = self.policy
        whole = avail.gpus
        if shape.gpus_per_node:
            whole = whole - set(pick_gpus(avail.gpus, shape.gpus_per_node))
        options = [(g, n - k, False) for g, n in avail.room if n >= k]
        if whole:
            options.append((min(whole), node.shards_per_gpu - k, True))
        if not options:
            return -1, -1, True, 0.0
        if policy == "firstfit":
            g, left, fresh = min(options)
        elif policy == "random":
            g, left, fresh = self.rng(node.index).choice(sorted(options))
        elif policy == "fgd":
            state = self.frag_state(node, avail)
            delta, left, g, fresh = min(
                (self.frag.delta(state, shape, n + k, fresh), n, g, fresh)
                for g, n, fresh in options
            )
            return g, left, fresh, delta
        else:
            g, left, fresh = min(options, key=lambda o: (o[2], o[1], o[0]))
        return g, left, fresh, 0.0

    def _shard_key(
        self, node: NodeProfile, avail: Avail, shape: Shape, at: float, job_end: float
    ) -> tuple[object, ...]:
        policy = self.policy
        if policy == "random":
            return (self.rng(node.index).random(),)
        _, left, fresh, delta = self.shard_choice(node, avail, shape)
        tail = (len(avail.gpus), avail.cpus, avail.mem, node.index)
        if policy == "fgd":
            return (delta, fresh, left, *tail)
        if policy == "frag":
            return (fresh, left, len(avail.gpus), _extension(node, at, job_end), *tail[1:])
        return (fresh, left, *tail)

    def _start(
        self,
        req: JobRequest,
        ask: Ask,
        cand: Candidate,
        chosen: list[tuple[NodeProfile, Avail]],
        on_prediction: bool,
    ) -> Start:
        """Take ``chosen`` for ``req``: planned until its expected end, killed at its limit."""
        shape = ask.shape
        placements = []
        end, limit_end = self.now + ask.expected, self.now + ask.duration
        for node, avail in chosen:
            shards = shape.shards_per_node
            if req.exclusive:
                cpus, mem = node.view.cpus_total, node.free_mem
                gpus = tuple(sorted(node.free_gpus))
            else:
                cpus, mem = shape.cpus_per_node, shape.mem_per_node_mb
                gpus = pick_gpus(avail.gpus, shape.gpus_per_node)
            if shards:
                # one GPU's shards first, then any whole GPUs it asks besides
                g = self.shard_choice(node, avail, shape)[0]
                whole = () if req.exclusive else tuple(x for x in gpus if x != g)
                if len(whole) < shape.gpus_per_node:
                    rest = avail.gpus - {g}
                    whole = pick_gpus(frozenset(rest), shape.gpus_per_node)
                gpus = (g, *whole)
            self.avail.take(node, cpus, mem, gpus, end, req.job_id, limit_end, shards)
            placements.append(Placement(node.name, cpus, mem, gpus, shards))
        self.placed += 1
        return Start(req.job_id, cand.partition.name, tuple(placements), on_prediction)


def _extension(node: NodeProfile, at: float, job_end: float) -> float:
    """How much later ``node`` would be wholly free with a job from ``at`` to
    ``job_end`` on it than it will be anyway (its jobs' expected ends)."""
    busy_until = max((r.end for r in node.releases if r.end > at), default=at)
    for h in node.holds:
        if h.start <= at < h.end:
            busy_until = max(busy_until, h.end)
    return 0.0 if job_end <= busy_until else job_end - busy_until


def pick_gpus(available: frozenset[int], count: int) -> tuple[int, ...]:
    return tuple(sorted(available)[:count])
