"""What the nodes have to give over one pass: the pass's one mutable picture of them.

Built from the snapshot alone: each node's profile (profile.py: free now, what the
running jobs give back when, what advance reservations and preemptors' claims hold
for whom); then changed only through ``take`` (a start) and ``hold`` (a reservation
the pass makes, a claim), each of which moves ``version`` on, so that what was
searched for at one version (the forecaster's cache) is known stale at the next.
"""

from __future__ import annotations

from ctld.sched import preempt
from ctld.sched.model import Snapshot
from ctld.sched.predict import expected_end
from ctld.sched.profile import Hold, NodeProfile, Release


class Availability:
    def __init__(self, snap: Snapshot) -> None:
        now = snap.now
        self.nodes = {v.name: NodeProfile.from_view(v, i) for i, v in enumerate(snap.nodes)}
        for profile in self.nodes.values():
            profile.clock = now
        predict = snap.settings.predict
        # jobs being preempted: their end is their preemption's deadline, not a prediction
        preempted = {v for c in snap.claims for v in c.victims}
        for run in snap.running:
            end = limit_end = max(run.end_time, now + 1.0)  # overrunning: about to end
            if predict and run.predicted_s > 0 and run.job_id not in preempted:
                end = expected_end(run.start_time, run.predicted_s, run.end_time, now)
                end = max(end, now + 1.0)
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
        for profile in self.nodes.values():
            view = profile.view
            if view.available_at > now:  # powered down or powering up: busy until it boots
                profile.hold(
                    Hold(now, view.available_at, view.cpus_total, view.mem_total_mb,
                         profile.all_gpus, owner="power")
                )  # fmt: skip
        for resv in snap.reservations:
            for name in resv.nodes:
                node = self.nodes.get(name)
                if node is not None and resv.end > now:
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
                        node, owner, p.cpus, p.mem_mb, p.gpu_indices, victims, now
                    ):
                        node.hold(h)
        self.version = 0  # moved on by every take and hold
        # nodes by free GPU count: best fit looks at the fullest nodes first and stops
        # there, instead of scanning the whole cluster for every start
        self.max_gpus = max((len(n.all_gpus) for n in self.nodes.values()), default=0)
        self.buckets: list[dict[str, NodeProfile]] = [{} for _ in range(self.max_gpus + 1)]
        for node in self.nodes.values():
            self.buckets[len(node.free_gpus)][node.name] = node

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
        """A start's part on ``node``, from now (see NodeProfile.take_now)."""
        before = len(node.free_gpus)
        node.take_now(cpus, mem, gpus, end, job_id, limit_end, shards)
        if len(node.free_gpus) != before:
            del self.buckets[before][node.name]
            self.buckets[len(node.free_gpus)][node.name] = node
        self.version += 1

    def hold(self, node: NodeProfile, hold: Hold) -> None:
        """Keep part of ``node`` for ``hold.owner`` over the hold's time."""
        node.hold(hold)
        self.version += 1
