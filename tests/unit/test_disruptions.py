"""Planned disruptions on virtual time (ctld/ops/disruptions.py): a drain or a maintenance
reservation warns a checkpointing job with its signal and requeues it once it exits,
or stops it at the deadline and requeues it then; other jobs finish as Slurm lets them."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import signal
from typing import Any

from google.protobuf.json_format import MessageToDict

from corral.config import parse_config
from corral.identity import Identity
from corral.testing.inprocess import (
    ManualClock,
    RecordingDispatcher,
    make_cluster,
    register_all,
    registration,
)
from corral.whytext import explain_text
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js

Update = pb.JobStatusUpdate
ALICE = Identity("alice", 1000, 1000)
ADMIN = Identity("daemon", 1, 1)


def config() -> Any:
    return parse_config(
        {
            "controller": {
                "operators": ["daemon"],
                "administrators": ["daemon"],
                "disruption_lead_s": 30,
            },
            "heartbeat": {"interval_s": 1.0, "timeout_s": 100.0},
            "nodes": [{"names": "n[1-3]", "cpus": 8}],
            "partitions": [{"name": "p", "nodes": "n[1-3]", "default": True}],
        }
    )


def spec(**kw: Any) -> pb.JobSpec:
    base: dict[str, Any] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)


async def drain_tasks(cluster: Cluster) -> None:
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


async def make(tmp_path: pathlib.Path) -> tuple[Cluster, ManualClock, RecordingDispatcher]:
    clock, disp = ManualClock(), RecordingDispatcher()
    cluster = make_cluster(config(), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=disp)
    await register_all(cluster)
    return cluster, clock, disp


async def started(cluster: Cluster, **kw: Any) -> pb.Job:
    job = await cluster.submit(ALICE, spec(**kw))
    await cluster.schedule_pass()
    await drain_tasks(cluster)
    assert job.state == js.RUNNING
    return job


async def drain(cluster: Cluster, node: str) -> None:
    req = pb.UpdateNodeRequest(names=[node], state="DRAIN", reason="swap a DIMM")
    await cluster.update_node(ADMIN, req)
    await drain_tasks(cluster)


async def exit_report(cluster: Cluster, job: pb.Job, **kw: Any) -> None:
    upd = Update(job_id=job.job_id, kind=Update.KIND_EXITED, restart_count=job.restart_count, **kw)
    await cluster.report_status(pb.ReportJobStatusRequest(node=job.batch_host, updates=[upd]))
    await drain_tasks(cluster)


def sent(disp: RecordingDispatcher, job: pb.Job) -> list[tuple[str, pb.SignalJobRequest]]:
    return [(n, r) for n, r in disp.signalled if r.job_id == job.job_id]


async def test_a_drain_warns_an_elastic_job_and_requeues_it_after_its_save(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, disp = await make(tmp_path)
    job = await started(cluster, nodes_min=2, nodes_max=3, elastic=True, requeue=True)
    plain = await started(cluster, nodelist="n1", no_requeue=False)
    await drain(cluster, "n2")
    warned = sent(disp, job)
    assert {n for n, _ in warned} == {"n1", "n2", "n3"}
    assert all(r.signal == signal.SIGUSR1 and r.full and not r.terminate for _, r in warned)
    assert job.state == js.RUNNING and job.requeue_on_exit
    assert job.disruption == "node n2 drained: swap a DIMM"
    assert not sent(disp, plain)  # no checkpointing job: it finishes, as Slurm's drain
    why = explain_text(MessageToDict(cluster.queries.explain(ALICE, job.job_id)))
    assert "Warned: node n2 drained: swap a DIMM; it is requeued once it exits" in why
    await drain(cluster, "n2")  # drained again: warned once
    assert len(sent(disp, job)) == 3
    await exit_report(cluster, job, exit_code=0)  # it saved and exited
    assert job.state == js.PENDING and job.restart_count == 1
    (run,) = cluster.store.earlier_runs([job.job_id])
    assert run.state == pb.JOB_STATE_REQUEUED and not job.disruption
    requeued = [e for e in job.events if e.event == "requeued"][-1]
    assert requeued.detail == "node n2 drained: swap a DIMM"
    await cluster.schedule_pass()
    await drain_tasks(cluster)
    assert job.state == js.RUNNING and "n2" not in [a.node for a in job.allocations]
    assert job.allocations[0].node == "n1"


async def test_a_job_that_ignores_the_warning_is_stopped_at_the_deadline_and_requeued(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, disp = await make(tmp_path)
    job = await started(cluster, nodelist="n1", requeue=True, signal="B:USR2@60")
    await drain(cluster, "n1")
    (warned,) = sent(disp, job)
    assert warned[1].signal == signal.SIGUSR2 and warned[1].batch_only
    clock.advance(59)  # its own @60 is its lead time
    await cluster.node_ops.disruptions.check()
    await drain_tasks(cluster)
    assert len(sent(disp, job)) == 1
    clock.advance(2)
    await cluster.node_ops.disruptions.check()
    await drain_tasks(cluster)
    kills = [r for _, r in sent(disp, job) if r.terminate]
    assert len(kills) == 1 and job.state == js.RUNNING and job.disruption_deadline == 0
    await cluster.node_ops.disruptions.check()  # stopped once
    assert len([r for _, r in sent(disp, job) if r.terminate]) == 1
    await exit_report(cluster, job, exit_signal=15)
    assert job.state == js.PENDING and job.restart_count == 1


async def test_a_maintenance_reservation_warns_at_the_lead_time(tmp_path: pathlib.Path) -> None:
    cluster, clock, disp = await make(tmp_path)
    job = await started(cluster, nodelist="n3", elastic=True, nodes_min=1, nodes_max=2)
    start = clock() + 100
    resv = pb.Reservation(
        name="fix",
        nodes="n3",
        users=["root"],
        start_time=start,
        end_time=start + 3600,
        flags=["MAINT"],
    )
    await cluster.create_reservation(ADMIN, resv)
    await cluster.node_ops.disruptions.check()
    assert not sent(disp, job)
    clock.advance(71)  # within 30 s of its start
    await cluster.node_ops.disruptions.check()
    await drain_tasks(cluster)
    warned = sent(disp, job)  # on each of its nodes (n3 and the one it grew onto)
    assert {r.signal for _, r in warned} == {signal.SIGUSR1} and len(warned) == len(job.allocations)
    assert job.disruption == "maintenance reservation fix starts"
    assert job.disruption_deadline == start


async def test_a_shrunk_elastic_job_grows_back_when_its_node_returns(
    tmp_path: pathlib.Path,
) -> None:
    clock, disp = ManualClock(), RecordingDispatcher()
    cfg = config()
    cfg = dataclasses.replace(
        cfg, controller=dataclasses.replace(cfg.controller, elastic_grow=True)
    )
    cluster = make_cluster(cfg, f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=disp)
    await register_all(cluster)
    job = await started(
        cluster, nodes_min=2, nodes_max=3, elastic=True, requeue=True, cpus_per_task=8
    )
    assert len(job.allocations) == 3
    for _ in range(250):  # n3 silent past the timeout (100 s): DOWN, the job shrinks
        clock.advance(0.5)
        for name in ("n1", "n2"):
            cluster.heartbeat(pb.HeartbeatRequest(name=name))
        await cluster.check_heartbeats()
    await drain_tasks(cluster)
    await cluster.schedule_pass()
    await drain_tasks(cluster)
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == ["n1", "n2"]
    await cluster.node_ops.disruptions.check()
    assert not job.disruption  # no node free: nothing offered
    await cluster.register_node(registration(cluster, "n3"))  # back, idle
    await cluster.node_ops.disruptions.check()
    await drain_tasks(cluster)
    assert job.disruption == "grow to 3 nodes: nodes are free"
    assert [r.signal for _, r in sent(disp, job) if r.run == 1] == [signal.SIGUSR1] * 2
    await exit_report(cluster, job, exit_code=0)  # saved at the signal
    assert job.state == js.PENDING and job.interruptions[-1].cause == "grow"
    await cluster.schedule_pass()
    await drain_tasks(cluster)
    assert job.state == js.RUNNING and len(job.allocations) == 3
    assert job.allocations[0].node == "n1" and job.previous_num_nodes == 2


async def test_a_job_running_srun_steps_is_warned_in_its_steps_only(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _, disp = await make(tmp_path)
    job = await started(cluster, nodes_min=2, nodes_max=3, elastic=True, requeue=True)
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    await drain(cluster, "n3")
    warned = sent(disp, job)
    # as Slurm's --signal without B:: the batch shell waiting on srun is left alone
    assert warned and all(not r.full and not r.batch_only for _, r in warned)
