"""Pending reasons: one enum, read-only snapshots, the applier as the writer."""

from __future__ import annotations

import ast
import asyncio
import pathlib
import re

import pytest

from client.why import REASONS
from corral.config import ClusterConfig, parse_config
from corral.identity import Identity
from corral.reasons import Reason
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.sched import backfill

ALICE = Identity("alice", 1000, 1000)


def config(**scheduler: object) -> ClusterConfig:
    return parse_config(
        {
            "nodes": [{"names": "n[1-2]"}],
            "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
            "scheduler": scheduler,
        }
    )


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


async def settle(cluster: Cluster) -> None:
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


def test_every_reason_is_worded_by_corral_why() -> None:
    assert set(Reason) <= set(REASONS)
    assert REASONS[Reason.JOB_ARRAY_TASK_LIMIT]


def test_the_core_names_its_reasons_from_the_enum() -> None:
    for name in ("RESOURCES", "PRIORITY", "PARTITION_DOWN", "RESERVATION"):
        assert isinstance(getattr(backfill, name), Reason)


@pytest.fixture
async def env(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    clock = ManualClock()
    cluster = make_cluster(
        config(), f"sqlite:///{tmp_path}/ctld.db", clock=clock, dispatcher=RecordingDispatcher()
    )
    await register_all(cluster, gpus=2)
    yield cluster, clock
    cluster.store.close()


async def test_a_snapshot_writes_nothing(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    first = await cluster.submit(ALICE, spec(gpus_per_node=2, nodes_min=2, time_limit_s=600))
    await settle(cluster)
    assert first.state == js.RUNNING
    await cluster.submit(ALICE, spec(gpus_per_node=1))  # waits for Resources
    await cluster.submit(ALICE, spec(hold=True))
    await cluster.submit(ALICE, spec(begin_time=clock.now + 100_000))
    await cluster.submit(ALICE, spec(dependency=f"afterok:{first.job_id}"))
    await cluster.submit(ALICE, spec(array="0-3%1", gpus_per_node=1))
    await settle(cluster)
    clock.advance(3600)  # a priority recalculation is due: the snapshot must not do it
    before = {i: j.SerializeToString() for i, j in cluster.jobs.items()}
    revisions, version = dict(cluster.revisions), cluster.version
    snap = cluster.snapshot()
    cluster.explain(ALICE, max(cluster.jobs))
    assert {i: j.SerializeToString() for i, j in cluster.jobs.items()} == before
    assert cluster.revisions == revisions and cluster.version == version
    blocked = {r.job_id: r.blocked_reason for r in snap.pending if r.blocked_reason}
    assert sorted(blocked.values()) == sorted(
        [
            Reason.JOB_HELD_USER,
            Reason.BEGIN_TIME,
            Reason.DEPENDENCY,
            *[Reason.JOB_ARRAY_TASK_LIMIT] * 3,
        ]
    )
    # the applier writes what the snapshot carried, via the plan
    await settle(cluster)
    for job_id, reason in blocked.items():
        assert cluster.jobs[job_id].reason == reason


async def test_never_satisfied_dependency_is_cancelled_by_the_applier(
    tmp_path: pathlib.Path,
) -> None:
    clock = ManualClock()
    cluster = make_cluster(
        config(kill_invalid_depend=True),
        f"sqlite:///{tmp_path}/ctld.db",
        clock=clock,
        dispatcher=RecordingDispatcher(),
    )
    await register_all(cluster)
    first = await cluster.submit(ALICE, spec(hold=True))
    after = await cluster.submit(ALICE, spec(dependency=f"afterok:{first.job_id}"))
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[first.job_id])))
    snap = cluster.snapshot()
    cluster.explain(ALICE, after.job_id)
    assert after.state == js.PENDING  # reading decides, never acts
    assert any(r.blocked_reason == Reason.DEPENDENCY_NEVER_SATISFIED for r in snap.pending)
    version = cluster.version
    await settle(cluster)
    assert after.state == js.CANCELLED
    assert after.events[-1].cause == "sched:kill_invalid_depend"
    assert cluster.version > version  # the cancel went through the commit step
    stored = cluster.store.query_jobs(
        job_ids=[after.job_id], users=[], states=[], start_after=0, end_before=0, limit=1
    )
    assert stored[0].state == js.CANCELLED
    cluster.store.close()


def test_settle_keeps_a_pending_reason_and_its_detail() -> None:
    from ctld.core.pending import settle

    job = pb.Job(state=js.PENDING, reason="ReqNodeNotAvail, UnavailableNodes:n[1-2]")
    assert not settle(job) and job.reason == "ReqNodeNotAvail, UnavailableNodes:n[1-2]"
    job.reason = Reason.NODES_DOWN  # a reason with a comma of its own stays whole
    assert not settle(job) and job.reason == Reason.NODES_DOWN
    job.hold = pb.HOLD_USER
    assert settle(job) and job.reason == Reason.JOB_HELD_USER
    job.hold = pb.HOLD_NONE
    assert settle(job) and job.reason == ""  # released: the next pass decides
    job.reason = "None"  # what a running job shows, back in the queue
    assert settle(job) and job.reason == Reason.RESOURCES


# ---------------------------------------------------------------- where a reason is decided

CTLD = pathlib.Path(__file__).resolve().parents[2] / "src" / "ctld"
DOC = CTLD.parents[1] / "docs" / "architecture.md"


def _reason_names() -> set[str]:
    """The names a reason is decided by: Reason's members, and the core's own names for
    them (ctld/sched/ask.py: RESOURCES = Reason.RESOURCES, ...)."""
    from ctld.sched import ask

    values = {str(r) for r in Reason}
    return {
        name
        for name, value in vars(ask).items()
        if name.isupper()
        and isinstance(value, str)
        and (value in values or value.split(",")[0] in values)
    }


def _decides(path: pathlib.Path, names: set[str]) -> bool:
    """Whether ``path`` decides a pending reason: it uses one (``Reason.X``, or a core
    name for one) other than in a comparison (a read) or in naming it at module level."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        reason = (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Reason"
        ) or (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load))
        if not reason:
            continue
        up = parents.get(node)
        while isinstance(up, ast.Tuple | ast.List | ast.Set):
            up = parents.get(up)
        if isinstance(up, ast.Compare):
            continue  # reads a reason
        statement = up
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = parents.get(statement)
        if isinstance(statement, ast.Assign) and parents.get(statement) is tree:
            continue  # names one (a module's constant)
        return True
    return False


def _answer() -> str:
    """The answer's first sentence: the files where a pending reason is decided."""
    text = DOC.read_text()
    return text.split("**Where is a pending reason decided?**", 1)[1].split(".\n", 1)[0]


def test_a_pending_reason_is_decided_where_the_architecture_says() -> None:
    """The one-hop answer (docs/architecture.md), checked against the code: in ctld, in
    pending.py alone; in the core, in the files the answer names, and only there."""
    names = _reason_names()
    ctld_side = {
        str(p.relative_to(CTLD))
        for p in CTLD.rglob("*.py")
        if p.relative_to(CTLD).parts[0] not in ("sched", "sim") and _decides(p, names)
    }
    core = {str(p.relative_to(CTLD)) for p in (CTLD / "sched").glob("*.py") if _decides(p, names)}
    assert ctld_side == {"core/pending.py"}
    named = set(re.findall(r"`(?:ctld/)?((?:sched/|core/)?\w+\.py)`", _answer()))
    assert core and named == ctld_side | core


def test_the_checker_finds_a_reason_decided_elsewhere(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(job):\n    return Reason.RESOURCES\n")
    read = tmp_path / "read.py"
    read.write_text("X = Reason.PRIORITY\ndef f(r):\n    return r in (Reason.RESOURCES,)\n")
    assert _decides(bad, set()) and not _decides(read, set())
    core = tmp_path / "core.py"
    core.write_text("def f(self, req):\n    self.reasons[req.job_id] = RESOURCES\n")
    assert _decides(core, {"RESOURCES"})
