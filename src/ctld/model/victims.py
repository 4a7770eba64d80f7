"""The preemptions under way: which jobs are being preempted, what is claimed for whom.

``State.preemptions`` holds one; ``preemption.py`` fills it, the snapshot reads the
claims (``Snapshot.claims``), ``Endings.preempted`` reads a victim when its node
reports it gone. Kept in memory only (see preemption.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.sched import Claim, Placement


@dataclass
class Victim:
    job_id: int
    run: int  # the run preempted (a later run of the job is not)
    preemptor: int
    mode: str  # "requeue" or "cancel"
    grace_end: float  # when its grace time is over: then it is terminated
    deadline: float  # when it is expected to be gone: grace time + KillWait
    terminated: bool = False  # the terminate was sent


@dataclass
class ClaimRecord:
    job_id: int
    partition: str
    placements: tuple[Placement, ...]
    victims: set[int] = field(default_factory=set)
    settled: bool = False  # a pass has seen it with every victim gone


class Preemptions:
    """Which jobs are being preempted, and what is claimed for whom (State holds one)."""

    def __init__(self) -> None:
        self.victims: dict[int, Victim] = {}
        self.claims: dict[int, ClaimRecord] = {}

    def victim(self, job: pb.Job) -> Victim | None:
        """The preemption of ``job``'s current run, if it is being preempted."""
        v = self.victims.get(job.job_id)
        return v if v is not None and v.run == job.restart_count else None

    def next_grace_end(self) -> float | None:
        """When the next grace time runs out (the scheduler loop wakes then)."""
        return min((v.grace_end for v in self.victims.values() if not v.terminated), default=None)

    def claim_views(self) -> tuple[Claim, ...]:
        return tuple(
            Claim(c.job_id, c.placements, tuple(sorted(c.victims)), c.partition)
            for c in self.claims.values()
        )

    def prune(self, jobs: dict[int, pb.Job]) -> None:
        """Forget victims that left their nodes and claims that no longer apply: the
        preemptor started, left, was held, or had a pass with its victims gone and
        did not start (it queues again like any job then)."""
        for job_id, v in list(self.victims.items()):
            job = jobs.get(job_id)
            if job is None or job.state not in js.ON_NODE or job.restart_count != v.run:
                del self.victims[job_id]
        for job_id, c in list(self.claims.items()):
            job = jobs.get(job_id)
            if job is None or job.state != js.PENDING or job.hold:
                del self.claims[job_id]
                continue
            c.victims &= set(self.victims)
            if not c.victims:
                if c.settled:
                    del self.claims[job_id]
                else:
                    c.settled = True
