"""sacctmgr's layout (Slurm's print_fields) and the scheduling core's accounting limits,
without daemons."""

from __future__ import annotations

import pytest

from client.sacctmgr import BadFormat, format_records, parse_fields
from ctld.sched import (
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    RunningView,
    Snapshot,
    schedule,
)
from ctld.sched.model import AssocLimit, LimitSet, QosLimit, TresLimit

USERS = [
    {"User": "alice", "Def Acct": "vision", "Admin": "None"},
    {"User": "root", "Def Acct": "root", "Admin": "Administrator"},
]


def test_fixed_width_columns_as_slurm_prints_them() -> None:
    fields = parse_fields("User,DefaultAccount,Admin")
    assert format_records(USERS, fields) == (
        "      User   Def Acct     Admin \n"
        "---------- ---------- --------- \n"
        "     alice     vision      None \n"
        "      root       root Administ+ \n"
    )


def test_parsable_and_widths() -> None:
    fields = parse_fields("U,DefaultA,Ad%-14")
    assert format_records(USERS, fields, parsable="P") == (
        "User|Def Acct|Admin\nalice|vision|None\nroot|root|Administrator\n"
    )
    assert format_records(USERS[:1], fields, parsable="p", header=False) == "alice|vision|None|\n"
    assert format_records(USERS[:1], fields, header=False) == (
        "     alice     vision None           \n"
    )
    with pytest.raises(BadFormat, match="Invalid field requested: Colour"):
        parse_fields("User,Colour")


def test_slurms_abbreviations_name_the_right_columns() -> None:
    names = [n for n, _ in parse_fields("Acc,Des,O,GrpJ,GrpS,MaxJ,MaxS,MaxW,Prio,PreemptM,GraceT")]
    assert names == [
        "Account",
        "Descr",
        "Org",
        "GrpJobs",
        "GrpSubmit",
        "MaxJobs",
        "MaxSubmit",
        "MaxWall",
        "Priority",
        "PreemptMode",
        "GraceTime",
    ]


def node(name: str, gpus_free: tuple[int, ...] = tuple(range(8))) -> NodeView:
    return NodeView(name, 64, 512000, 8, 64, 512000, gpus_free)


def job(job_id: int, user: str, account: str, gpus: int = 2, qos: str = "normal") -> JobRequest:
    return JobRequest(
        job_id,
        ("p",),
        gpus_per_node=gpus,
        user=user,
        account=account,
        qos=qos,
        time_limit_s=600,
        priority=100 - job_id,
    )


def running(job_id: int, user: str, account: str, gpus: tuple[int, ...]) -> RunningView:
    return RunningView(
        job_id, 1e9, (Placement("n1", 1, 0, gpus),), user=user, qos="normal", account=account
    )


def snap(pending: list[JobRequest], run: list[RunningView], limits: LimitSet) -> Snapshot:
    used = {g for r in run for p in r.placements for g in p.gpu_indices}
    free = tuple(i for i in range(8) if i not in used)
    return Snapshot(
        1,
        0.0,
        (node("n1", free), node("n2")),
        (PartitionView("p", ("n1", "n2")),),
        tuple(pending),
        tuple(run),
        limits=limits,
    )


TREE = (
    AssocLimit("root/", ""),
    AssocLimit("lab/", "root/", grp=TresLimit(gpus=6)),
    AssocLimit("vision/", "lab/", grp=TresLimit(gpus=4)),
    AssocLimit("vision/alice", "vision/", max_jobs=3),
    AssocLimit("vision/bob", "vision/"),
    AssocLimit("nlp/", "lab/"),
    AssocLimit("nlp/carol", "nlp/"),
)


def test_a_group_limit_counts_every_user_of_the_subtree() -> None:
    plan = schedule(
        snap(
            [job(3, "bob", "vision"), job(4, "carol", "nlp"), job(5, "carol", "nlp")],
            [running(1, "alice", "vision", (0, 1)), running(2, "alice", "vision", (2, 3))],
            LimitSet(assocs=TREE),
        )
    )
    # vision holds 4 of its 4 GPUs; lab 4 of 6: one nlp job fits, the second is over lab's
    assert [s.job_id for s in plan.starts] == [4]
    assert plan.reasons[3] == "AssocGrpGRES"
    assert plan.reasons[5] == "AssocGrpGRES"


def test_max_jobs_and_qos_per_user_limits() -> None:
    limits = LimitSet(assocs=TREE, qos=(QosLimit("normal", per_user=TresLimit(gpus=2)),))
    plan = schedule(snap([job(3, "bob", "vision"), job(4, "bob", "vision")], [], limits))
    assert [s.job_id for s in plan.starts] == [3]
    assert plan.reasons[4] == "QOSMaxGRESPerUser"
    tree = (*TREE[:3], AssocLimit("vision/alice", "vision/", max_jobs=1))
    plan = schedule(
        snap(
            [job(3, "alice", "vision", gpus=0), job(4, "alice", "vision", gpus=0)],
            [],
            LimitSet(assocs=tree),
        )
    )
    assert [s.job_id for s in plan.starts] == [3]
    assert plan.reasons[4] == "AssocMaxJobsLimit"


def test_without_limits_nothing_is_counted() -> None:
    plan = schedule(snap([job(i, "bob", "vision", gpus=4) for i in (3, 4, 5, 6)], [], LimitSet()))
    assert len(plan.starts) == 4
