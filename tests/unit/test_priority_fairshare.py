"""Multifactor priority, classic fair-share and dependency evaluation: the formulas."""

from __future__ import annotations

import math

import pytest

from corral.config import PriorityConfig
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from ctld.model.deps import DepState, evaluate
from ctld.model.usage import UsageLedger
from ctld.sched.fairshare import AccountShare, factor_of, share_rows
from ctld.sched.priority import Weights, factors


def test_priority_is_the_weighted_sum_less_nice() -> None:
    w = Weights(age=1000, fairshare=10000, job_size=1000, partition=1000, qos=1000, max_age_s=100)
    f = factors(
        w,
        age_s=50,
        fairshare=0.5,
        cpus=8,
        cluster_cpus=32,
        partition_tier=1,
        max_partition_tier=2,
        qos_priority=10,
        max_qos_priority=10,
        nice=100,
    )
    assert (f.age, f.fairshare, f.job_size, f.partition, f.qos) == (0.5, 0.5, 0.25, 0.5, 1.0)
    assert f.priority == 500 + 5000 + 250 + 500 + 1000 - 100
    old = factors(
        w,
        age_s=10**9,
        fairshare=0,
        cpus=0,
        cluster_cpus=0,
        partition_tier=0,
        max_partition_tier=0,
        qos_priority=0,
        max_qos_priority=0,
        nice=0,
    )
    assert old.age == 1.0 and old.priority == 1000  # age saturates at max_age


def test_fairshare_unused_is_one_fair_use_is_half() -> None:
    tree = [AccountShare("root", "", 1, (("alice", 1), ("bob", 1)))]
    rows = share_rows(tree, {("root", "alice"): 100.0, ("root", "bob"): 100.0})
    assert factor_of(rows, "root", "alice") == pytest.approx(0.5)
    rows = share_rows(tree, {("root", "alice"): 100.0})
    assert factor_of(rows, "root", "bob") > factor_of(rows, "root", "alice")
    assert factor_of(share_rows(tree, {}), "root", "bob") == 1.0


def test_fairshare_passes_account_usage_down() -> None:
    tree = [
        AccountShare("root", "", 1),
        AccountShare("ml", "root", 3, (("alice", 1),)),
        AccountShare("bio", "root", 1, (("bob", 1),)),
    ]
    rows = share_rows(tree, {("ml", "alice"): 300.0, ("bio", "bob"): 100.0})
    by = {(r.account, r.user): r for r in rows}
    assert by[("ml", "")].norm_shares == pytest.approx(0.75)
    assert by[("bio", "")].norm_usage == pytest.approx(0.25)
    # both used exactly their share: both at 0.5
    assert by[("ml", "alice")].fairshare == pytest.approx(0.5, abs=1e-6)
    assert by[("bio", "bob")].fairshare == pytest.approx(0.5, abs=1e-6)


def test_usage_decays_with_the_half_life() -> None:
    ledger = UsageLedger(PriorityConfig(decay_half_life_s=100))
    ledger.add(("a", "u"), 80.0, at=0.0)
    assert ledger.snapshot(100.0, [])[("a", "u")] == pytest.approx(40.0)
    ledger.add(("a", "u"), 10.0, at=200.0)
    assert ledger.snapshot(200.0, [])[("a", "u")] == pytest.approx(30.0)
    assert math.isclose(ledger.snapshot(300.0, [])[("a", "u")], 15.0)


def _job(job_id: int, state: int = js.PENDING, dep: str = "", name: str = "n") -> pb.Job:
    return pb.Job(job_id=job_id, state=state, spec=pb.JobSpec(dependency=dep, name=name))


@pytest.mark.parametrize(
    ("dep", "other_state", "expected"),
    [
        ("afterok:1", js.RUNNING, DepState.WAITING),
        ("afterok:1", js.COMPLETED, DepState.MET),
        ("afterok:1", js.FAILED, DepState.NEVER),
        ("afternotok:1", js.COMPLETED, DepState.NEVER),
        ("afternotok:1", js.CANCELLED, DepState.MET),
        ("afterany:1", js.FAILED, DepState.MET),
        ("after:1", js.PENDING, DepState.WAITING),
        ("after:1", js.RUNNING, DepState.MET),
        ("afterok:1?afternotok:1", js.FAILED, DepState.MET),
        ("afterok:1,afterany:9", js.COMPLETED, DepState.MET),  # 9 is long gone: met
    ],
)
def test_dependency_states(dep: str, other_state: int, expected: DepState) -> None:
    other = _job(1, other_state)
    other.start_time = 10.0
    jobs = {1: other}
    assert evaluate(_job(2, dep=dep), jobs.get, 100.0, lambda j: False) is expected


def test_after_with_a_delay_and_singleton() -> None:
    other = _job(1, js.RUNNING)
    other.start_time = 100.0
    job = _job(2, dep="after:1+2")
    assert evaluate(job, {1: other}.get, 150.0, lambda j: False) is DepState.WAITING
    assert evaluate(job, {1: other}.get, 221.0, lambda j: False) is DepState.MET
    single = _job(3, dep="singleton")
    assert evaluate(single, {}.get, 0.0, lambda j: True) is DepState.WAITING


def test_a_dependency_on_an_array_waits_for_all_its_tasks() -> None:
    tasks = [_job(10 + i, js.COMPLETED) for i in range(3)]
    for i, t in enumerate(tasks):
        t.array_job_id, t.array_task_id = 10, i
    tasks[2].state = js.RUNNING
    job = _job(20, dep="afterok:10")
    lookup = {t.job_id: t for t in tasks}.get
    assert evaluate(job, lookup, 0.0, lambda j: False, lambda _: tasks) is DepState.WAITING
    tasks[2].state = js.FAILED
    assert evaluate(job, lookup, 0.0, lambda j: False, lambda _: tasks) is DepState.NEVER
    one = _job(21, dep="afterok:10_1")
    assert evaluate(one, lookup, 0.0, lambda j: False, lambda _: tasks) is DepState.MET
