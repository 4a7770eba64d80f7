"""Every pending reason the core decides, case by case, as Slurm 22.05 names it.

Each row is a small cluster and a job (with, for some, a job ahead of it); the reason
the pass gives the job is the one the real Slurm gave in the same case on this machine
(../shared/anchors/slurm): a MAINT reservation, begun or to come, is "ReqNodeNotAvail,
Reserved for maintenance" even on a busy node and for the jobs queued behind; any other
reservation in the way "ReqNodeNotAvail, May be reserved for other job"; an INACTIVE
partition "PartitionInactive"; a drained partition runs its queue.
"""

from __future__ import annotations

import dataclasses

import pytest

from corral.reasons import Reason
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    ReservationView,
    RunningView,
    Settings,
    Snapshot,
    schedule,
)
from tests.unit.test_backfill import busy, node

JOB = 1  # the job whose reason each row checks; job 0 is the one ahead of it, if any
HOUR = 3600


def down(name: str) -> NodeView:
    return dataclasses.replace(node(name), schedulable=False)


def running_on(name: str) -> RunningView:
    """A job holding all of ``name`` for an hour (with ``full(name)`` as its view)."""
    return RunningView(90 + int(name[1:]), HOUR, (Placement(name, 8, 0, (0, 1, 2, 3)),), user="x")


def full(name: str) -> NodeView:
    return busy(name, 4, 8)


def resv(start: float, *nodes: str, maint: bool = False, name: str = "r") -> ReservationView:
    flags = ("MAINT",) if maint else ()
    return ReservationView(name, start, start + HOUR, nodes, users=("ops",), flags=flags)


@dataclasses.dataclass(frozen=True)
class Case:
    job: JobRequest
    nodes: tuple[NodeView, ...] = (node("n1"), node("n2"))
    state: str = "UP"
    running: tuple[RunningView, ...] = ()
    reservations: tuple[ReservationView, ...] = ()
    ahead: JobRequest | None = None
    max_time_s: int = -1
    max_nodes: int = 0
    settings: Settings = dataclasses.field(default_factory=Settings)

    def reason(self) -> str | None:
        """The job's reason in the pass (None: it starts)."""
        names = tuple(n.name for n in self.nodes)
        part = PartitionView("p", names, self.state, self.max_nodes, self.max_time_s)
        pending = (self.ahead, self.job) if self.ahead else (self.job,)
        snap = Snapshot(
            1, 0.0, self.nodes, (part,), pending, self.running, self.reservations, self.settings
        )
        plan = schedule(snap)
        if any(s.job_id == JOB for s in plan.starts):
            return None
        return plan.reasons[JOB]


def job(**kw: object) -> JobRequest:
    base: dict[str, object] = {"gpus_per_node": 4, "time_limit_s": HOUR, "user": "al"}
    return JobRequest(JOB, ("p",), **{**base, **kw})  # type: ignore[arg-type]


def whole_cluster(**kw: object) -> JobRequest:
    """A job ahead that wants both nodes (blocked when one is busy)."""
    return JobRequest(0, ("p",), nodes_min=2, gpus_per_node=4, time_limit_s=HOUR, **kw)  # type: ignore[arg-type]


BUSY = (running_on("n1"), running_on("n2"))
FULL = (full("n1"), full("n2"))
MAINT = Reason.RESERVED_FOR_MAINTENANCE
OTHER = Reason.MAY_BE_RESERVED

CASES: dict[str, tuple[Case, str | None]] = {
    "idle: it starts": (Case(job()), None),
    "busy nodes": (Case(job(), FULL, running=BUSY), Reason.RESOURCES),
    "behind a blocked job": (
        Case(
            job(time_limit_s=2 * HOUR),  # it would delay the job ahead
            (full("n1"), node("n2")),
            running=(running_on("n1"),),
            ahead=whole_cluster(),
        ),
        Reason.PRIORITY,
    ),
    "partition down": (Case(job(), state="DOWN"), Reason.PARTITION_DOWN),
    "partition inactive": (Case(job(), state="INACTIVE"), Reason.PARTITION_INACTIVE),
    "partition drained: its queue runs": (Case(job(), state="DRAIN"), None),
    "over MaxTime": (Case(job(), max_time_s=600), Reason.PARTITION_TIME_LIMIT),
    "over MaxNodes": (Case(job(nodes_min=2), max_nodes=1), Reason.PARTITION_NODE_LIMIT),
    "-w a node that is down": (
        Case(job(nodelist=("n2",)), nodes=(node("n1"), down("n2"))),
        "ReqNodeNotAvail, UnavailableNodes:n2",
    ),
    "-w a node not in the partition": (Case(job(nodelist=("zz",))), Reason.REQ_NODE_NOT_AVAIL),
    "too few nodes up": (
        Case(job(nodes_min=2), nodes=(node("n1"), down("n2"))),
        Reason.NODES_DOWN,
    ),
    "no node with its feature": (Case(job(features=("container",))), Reason.BAD_CONSTRAINTS),
    "its own reservation to come": (
        Case(job(reservation="r"), reservations=(resv(600, "n1", "n2"),)),
        Reason.RESERVATION,
    ),
    "a MAINT reservation now, idle nodes": (
        Case(job(), reservations=(resv(0, "n1", "n2", maint=True),)),
        MAINT,
    ),
    "a MAINT reservation within its limit": (
        Case(job(), reservations=(resv(600, "n1", "n2", maint=True),)),
        MAINT,
    ),
    "a MAINT reservation, busy nodes too": (
        Case(job(), FULL, running=BUSY, reservations=(resv(600, "n1", "n2", maint=True),)),
        MAINT,
    ),
    "behind a blocked job, a MAINT reservation": (
        Case(
            job(),
            (full("n1"), node("n2")),
            running=(running_on("n1"),),
            reservations=(resv(600, "n1", "n2", maint=True),),
            ahead=whole_cluster(),
        ),
        MAINT,
    ),
    "a reservation now, idle nodes": (Case(job(), reservations=(resv(0, "n1", "n2"),)), OTHER),
    "a reservation within its limit": (Case(job(), reservations=(resv(600, "n1", "n2"),)), OTHER),
    "a reservation, a node of the partition drained": (
        Case(
            job(), nodes=(node("n1"), node("n2"), down("n3")), reservations=(resv(0, "n1", "n2"),)
        ),
        "ReqNodeNotAvail, UnavailableNodes:n3",
    ),
    "a MAINT reservation and another": (
        Case(job(), reservations=(resv(0, "n1", maint=True), resv(0, "n2", name="s"))),
        MAINT,
    ),
    "a reservation after its limit: it starts": (
        Case(job(time_limit_s=300), reservations=(resv(600, "n1", "n2", maint=True),)),
        None,
    ),
    "a reservation on one node: the other will do": (
        Case(job(), reservations=(resv(0, "n1", maint=True),)),
        None,
    ),
    "short enough for the reservation, busy nodes": (
        Case(
            job(time_limit_s=300),
            FULL,
            running=BUSY,
            reservations=(resv(600, "n1", "n2", maint=True),),
        ),
        Reason.RESOURCES,
    ),
    "a reservation on one node, the other busy": (
        Case(
            job(),
            (node("n1"), full("n2")),
            running=(running_on("n2"),),
            reservations=(resv(0, "n1", maint=True),),
        ),
        Reason.RESOURCES,
    ),
    "-w a reserved node": (
        Case(job(nodelist=("n1",)), reservations=(resv(0, "n1"),)),
        OTHER,
    ),
    "the QOS's jobs per user": (
        Case(
            job(qos="normal"),
            running=(RunningView(98, HOUR, (Placement("n2", 1, 0, ()),), user="al", qos="normal"),),
            settings=Settings(qos_max_jobs_per_user=(("normal", 1),)),
        ),
        Reason.QOS_MAX_JOBS_PER_USER,
    ),
    "held: ctld's reason, carried": (Case(job(blocked_reason="JobHeldUser")), "JobHeldUser"),
    "a dependency: ctld's reason, carried": (Case(job(blocked_reason="Dependency")), "Dependency"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_reason_is_slurms(name: str) -> None:
    case, expected = CASES[name]
    assert case.reason() == expected


def test_the_class_mates_of_a_job_held_off_by_maintenance_get_its_reason() -> None:
    # deep in a queue (no forecast left to make), a job's class-mates get its verdict
    jobs = tuple(dataclasses.replace(job(), job_id=i) for i in range(1, 6))
    snap = Snapshot(
        1,
        0.0,
        (node("n1"), node("n2")),
        (PartitionView("p", ("n1", "n2")),),
        jobs,
        reservations=(resv(0, "n1", "n2", maint=True),),
        settings=Settings(reserve_depth=1, forecast_depth=0),
    )
    assert set(schedule(snap).reasons.values()) == {MAINT}


def test_a_dependency_is_named_before_a_begin_time() -> None:
    # Slurm 22.05 (on this machine): --dependency and --begin both unmet: Dependency
    from corral.wire import corral_pb2 as pb
    from ctld.core.pending import blocked_reason
    from ctld.model.deps import DepState

    job = pb.Job(eligible_time=1000.0, spec=pb.JobSpec(dependency="afterok:1"))
    assert blocked_reason(job, 0.0, lambda j: DepState.WAITING) == Reason.DEPENDENCY
    assert blocked_reason(job, 0.0, lambda j: DepState.NEVER) == (Reason.DEPENDENCY_NEVER_SATISFIED)
    assert blocked_reason(job, 0.0, lambda j: DepState.MET) == Reason.BEGIN_TIME
    job.hold = pb.HOLD_USER
    assert blocked_reason(job, 0.0, lambda j: DepState.WAITING) == Reason.JOB_HELD_USER
