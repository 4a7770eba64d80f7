"""The core makes a node's profile only when a pass looks at the node (issue 29), and
decides exactly what it decided with every profile made up front; the node index it
keeps between passes follows a changed snapshot as a fresh one would."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

import pytest

from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    ReservationView,
    RunningView,
    Settings,
    Snapshot,
    backfill,
    preempt,
    reclaim,
    schedule,
)
from ctld.sched import availability as availability_mod
from ctld.sched.backfill import _Pass
from ctld.sched.model import Claim
from ctld.sched.nodeindex import NodeIndex, node_index
from ctld.sched.predict import expected_end
from ctld.sched.profile import Hold, NodeProfile, Release


def view(name: str, gpus: int = 8, gtype: str = "h100", **kw: object) -> NodeView:
    base = NodeView(
        name=name,
        cpus_total=64,
        mem_total_mb=64_000,
        gpus_total=gpus,
        cpus_free=64,
        mem_free_mb=64_000,
        gpus_free=tuple(range(gpus)),
        gpu_type=gtype,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_a_start_makes_profiles_only_of_the_nodes_it_looked_at() -> None:
    small = tuple(view(f"s{i}") for i in range(4))
    big = tuple(view(f"b{i:04d}") for i in range(2000))
    snap = Snapshot(
        version=1,
        now=0.0,
        nodes=small + big,
        partitions=(
            PartitionView("small", tuple(n.name for n in small)),
            PartitionView("big", tuple(n.name for n in big)),
        ),
        pending=(
            JobRequest(1, ("small",), gpus_per_node=1, time_limit_s=60),
            JobRequest(2, ("big",), gpus_per_node=8, time_limit_s=60),
        ),
        settings=Settings(placement="pack"),
    )
    one_pass = _Pass(snap)
    plan = one_pass.run()
    assert {s.job_id for s in plan.starts} == {1, 2}
    made = set(one_pass.placer.avail.made)
    # the small partition's job looked at its nodes only; the big one's whole free node
    # was the first it found
    assert made <= {n.name for n in small} | {"b0000"}, sorted(made)[:10]
    assert "b0000" in made and len(made) <= len(small) + 1


def _mixed(seed: int) -> Snapshot:
    """A small cluster with every kind of node a pass meets: drained and down nodes,
    partly allocated ones, two GPU types, shards, powered-down ones, a reservation, a
    preemptor's claim, a requeued job's claim; and a queue of mixed shapes over two
    partitions."""
    rng = random.Random(seed)
    nodes = []
    for i in range(24):
        gtype = "h100" if i % 3 else "a100"
        free = tuple(sorted(rng.sample(range(8), rng.randint(0, 8))))
        kw: dict[str, object] = {
            "gpus_free": free,
            "cpus_free": rng.randint(0, 64),
            "mem_free_mb": rng.choice((0, 16_000, 64_000)),
            "idle": len(free) == 8,
            "schedulable": rng.random() > 0.15,
        }
        if i % 7 == 3:
            kw["shards_per_gpu"] = 4
        if i % 11 == 5:
            kw["available_at"] = 120.0
        nodes.append(view(f"n{i:02d}", gtype=gtype, **kw))
    names = tuple(n.name for n in nodes)
    running = []
    for j in range(10):
        node = rng.choice(nodes)
        used = tuple(g for g in range(8) if g not in node.gpus_free)[:2]
        running.append(
            RunningView(
                job_id=1000 + j,
                end_time=rng.choice((300.0, 900.0, 3600.0)),
                placements=(Placement(node.name, 4, 1000, used),),
                start_time=0.0,
                predicted_s=rng.choice((0, 200)),
            )
        )
    pending = []
    for j in range(30):
        pending.append(
            JobRequest(
                j + 1,
                (rng.choice(("a", "b")),),
                priority=rng.randint(1, 100),
                gpus_per_node=rng.choice((0, 1, 2, 4, 8)),
                nodes_min=rng.choice((1, 1, 2)),
                time_limit_s=rng.choice((60, 600, 7200)),
                gpu_type=rng.choice(("", "", "a100")),
                submit_time=float(j),
                exclusive=rng.random() < 0.1,
                # a job requeued after a node failure, claiming back its two nodes
                reclaim=(names[12], names[13]) if j == 7 else (),
                reclaim_until=60.0 if j == 7 else 0.0,
                spares_ok=j == 7,
            )
        )
    pending.sort(key=lambda r: (-r.priority, r.submit_time, r.job_id))
    return Snapshot(
        version=seed,
        now=10.0,
        nodes=tuple(nodes),
        partitions=(PartitionView("a", names[:16]), PartitionView("b", names[8:])),
        pending=tuple(pending),
        running=tuple(running),
        reservations=(ReservationView("maint", 400.0, 800.0, names[4:7]),),
        claims=(Claim(9999, (Placement(names[9], 2, 100, ()),), (1000,)),),
        settings=Settings(
            placement=rng.choice(("pack", "firstfit", "frag")),
            reserve_depth=2,
            forecast_depth=4,
            predict=seed % 2 == 0,
        ),
    )


class MadeFirst(availability_mod.Availability):
    """The availability as it was before profiles were made lazily (issue 29): every
    node's profile up front, the running jobs' releases on all of them, then the power
    holds, the reservations', the claims' and the reclaims'; buckets of profiles, a take moving the
    node to the end of its new bucket. The reference the lazy one must agree with."""

    def __init__(self, snap: Snapshot, reclaimers: tuple[JobRequest, ...] = ()) -> None:
        super().__init__(snap, reclaimers)
        now = snap.now
        nodes = {v.name: NodeProfile.from_view(v, i) for i, v in enumerate(snap.nodes)}
        for profile in nodes.values():
            profile.clock = now
        preempted = {v for c in snap.claims for v in c.victims}
        for run in snap.running:
            end = limit_end = max(run.end_time, now + 1.0)
            if snap.settings.predict and run.predicted_s > 0 and run.job_id not in preempted:
                end = max(
                    expected_end(run.start_time, run.predicted_s, run.end_time, now), now + 1.0
                )
            for p in run.placements:
                node = nodes.get(p.node)
                if node is None:
                    continue
                if p.shards and p.gpu_indices:
                    whole = frozenset(p.gpu_indices[1:])
                    node.releases.append(
                        Release(end, p.cpus, p.mem_mb, whole, run.job_id, limit_end)
                    )
                    node.share_until(p.gpu_indices[0], end, limit_end)
                else:
                    gpus = frozenset(p.gpu_indices)
                    node.releases.append(
                        Release(end, p.cpus, p.mem_mb, gpus, run.job_id, limit_end)
                    )
        for profile in nodes.values():
            v = profile.view
            if v.available_at > now:
                profile.hold(
                    Hold(
                        now, v.available_at, v.cpus_total, v.mem_total_mb, profile.all_gpus, "power"
                    )
                )
        for resv in snap.reservations:
            for name in resv.nodes:
                node = nodes.get(name)
                if node is not None and resv.end > now:
                    v = node.view
                    owner = f"resv:{resv.name}"
                    node.hold(
                        Hold(
                            resv.start, resv.end, v.cpus_total, v.mem_total_mb, node.all_gpus, owner
                        )
                    )
        for claim in snap.claims:
            for p in claim.placements:
                node = nodes.get(p.node)
                if node is not None:
                    owner = preempt.claim_owner(claim.job_id)
                    victims = frozenset(claim.victims)
                    for h in preempt.claim_holds(
                        node, owner, p.cpus, p.mem_mb, p.gpu_indices, victims, now
                    ):
                        node.hold(h)
        for req in reclaimers:
            for name in req.reclaim:
                node = nodes.get(name)
                if node is not None:
                    node.hold(reclaim.hold(req, node.view, node.free_gpus, now))
        self.nodes.made = self.made = nodes
        self.by_count: list[dict[str, NodeProfile]] = [{} for _ in range(self.max_gpus + 1)]
        for node in nodes.values():
            self.by_count[len(node.free_gpus)][node.name] = node

    def bucket(self, free_gpus: int) -> Iterator[str]:
        return iter(list(self.by_count[free_gpus]))

    def take(
        self,
        node: NodeProfile,
        cpus: int,
        mem: int,
        gpus: tuple[int, ...],
        end: float,
        job_id: int,
        limit_end: float,
        shards: int,
    ) -> None:
        before = len(node.free_gpus)
        node.take_now(cpus, mem, gpus, end, job_id, limit_end, shards)
        if len(node.free_gpus) != before:
            del self.by_count[before][node.name]
            self.by_count[len(node.free_gpus)][node.name] = node
        self.version += 1


@pytest.mark.parametrize("seed", range(60))
def test_decisions_are_those_with_every_profile_made_first(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _mixed(seed)
    lazy = schedule(snap)
    monkeypatch.setattr(backfill, "Availability", MadeFirst)
    assert schedule(snap) == lazy


def test_the_kept_index_follows_changed_views_as_a_fresh_one() -> None:
    rng = random.Random(7)
    nodes = tuple(view(f"n{i:03d}") for i in range(200))
    index = node_index(nodes)
    for _ in range(30):
        changed = list(nodes)
        for i in rng.sample(range(len(nodes)), rng.randint(1, 20)):
            free = tuple(sorted(rng.sample(range(8), rng.randint(0, 8))))
            changed[i] = dataclasses.replace(changed[i], gpus_free=free)
        nodes = tuple(changed)
        index = node_index(nodes)
        fresh = NodeIndex(nodes)
        assert index.buckets == fresh.buckets
        assert index.position == fresh.position and index.max_gpus == fresh.max_gpus
    # a node drained: its candidates change, so the index starts over
    drained = (dataclasses.replace(nodes[0], schedulable=False), *nodes[1:])
    assert node_index(drained) is not index


def test_kept_candidates_share_the_whole_partition_and_stay_bounded() -> None:
    nodes = tuple(view(f"k{i:03d}") for i in range(300))
    part = PartitionView("p", tuple(n.name for n in nodes))
    # 300 needs (each -x one node) beside two that every node can hold
    pending = [
        JobRequest(10 + i, ("p",), gpus_per_node=1, exclude=(n.name,), time_limit_s=60)
        for i, n in enumerate(nodes)
    ]
    pending += [JobRequest(1, ("p",), gpus_per_node=9, time_limit_s=60)]  # none can
    pending += [JobRequest(2, ("p",), gpus_per_node=1, cpus_per_task=2, time_limit_s=60)]
    pending += [JobRequest(3, ("p",), gpus_per_node=2, time_limit_s=60)]
    snap = Snapshot(version=1, now=0.0, nodes=nodes, partitions=(part,), pending=tuple(pending))
    schedule(snap)
    kept = node_index(nodes).candidates
    assert len(kept) <= 257  # the cap (256) and at most one entry past it
    both = [
        found
        for key, (_, found) in kept.items()
        if key[0] != "all" and not isinstance(found, str) and len(found[0]) == len(nodes)
    ]
    assert len(both) == 2 and both[0] is both[1]  # jobs 2 and 3: one copy
