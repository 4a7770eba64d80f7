"""How ctld turns what a node reports into job states, drains and requeues."""

from __future__ import annotations

import asyncio

import pytest

from corral.config import parse_config
from corral.errors import InvalidRequest, PermissionDenied
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js

Update = pb.JobStatusUpdate
ALICE = Identity("alice", 1000, 1000)
ROOT = Identity("root", 0, 0)


def config(action: str = "flag") -> object:
    return parse_config(
        {
            "nodes": [{"names": "n[1-2]"}],
            "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
            "idle_gpus": {"window_s": 60, "action": action},
        }
    )


async def started(
    store_url: str, action: str = "flag"
) -> tuple[Cluster, pb.Job, RecordingDispatcher, str]:
    disp = RecordingDispatcher()
    url = store_url
    cluster = make_cluster(config(action), url, clock=ManualClock(), dispatcher=disp)  # type: ignore[arg-type]
    await register_all(cluster)
    job = await cluster.submit(
        ALICE, pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", name="t", gpus_per_node=1)
    )
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    assert job.state == js.RUNNING
    return cluster, job, disp, url


async def report(cluster: Cluster, job: pb.Job, **kw: object) -> None:
    upd = Update(job_id=job.job_id, **kw)  # type: ignore[arg-type]
    await cluster.report_status(pb.ReportJobStatusRequest(node=job.batch_host, updates=[upd]))
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))


@pytest.mark.parametrize(
    ("reason", "state", "why"),
    [
        (Update.END_TIMEOUT, js.TIMEOUT, "TimeLimit"),
        (Update.END_OUT_OF_MEMORY, js.OUT_OF_MEMORY, "OutOfMemory"),
    ],
)
async def test_end_reasons_become_slurm_states_with_usage(
    store_url: str, reason: int, state: int, why: str
) -> None:
    cluster, job, _, _ = await started(store_url)
    usage = pb.JobUsage(max_rss_kb=2048, user_cpu_s=1.5, gpu_util_max=90.0)
    await report(
        cluster, job, kind=Update.KIND_EXITED, exit_signal=9, end_reason=reason, usage=usage
    )
    assert job.state == state and job.reason == why
    assert job.usage.max_rss_kb == 2048 and job.usage.gpu_util_max == 90.0
    cluster.store.close()


async def test_prolog_failure_requeues_the_job_and_drains_the_node_durably(
    store_url: str,
) -> None:
    cluster, job, _, url = await started(store_url)
    node = job.batch_host
    await report(
        cluster,
        job,
        kind=Update.KIND_LAUNCH_FAILED,
        end_reason=Update.END_PROLOG_FAILED,
        detail="prolog failed: exit 1",
    )
    assert job.state == js.PENDING and job.restart_count == 1
    assert cluster.nodes[node].drain and cluster.nodes[node].reason == "Prolog error"
    cluster.store.close()
    reloaded = make_cluster(config(), url, clock=ManualClock())  # type: ignore[arg-type]
    assert reloaded.nodes[node].drain and reloaded.nodes[node].reason == "Prolog error"
    await reloaded.update_node(ROOT, pb.UpdateNodeRequest(names=[node], state="RESUME"))
    assert not reloaded.nodes[node].drain and reloaded.nodes[node].reason == ""
    reloaded.store.close()
    again = make_cluster(config(), url, clock=ManualClock())  # type: ignore[arg-type]
    assert not again.nodes[node].drain
    again.store.close()


async def test_other_launch_failures_fail_the_job_with_the_nodes_words(
    store_url: str,
) -> None:
    cluster, job, _, _ = await started(store_url)
    await report(
        cluster, job, kind=Update.KIND_LAUNCH_FAILED, detail="user alice is unknown on node n1"
    )
    assert job.state == js.FAILED
    assert job.reason == "launch failed: user alice is unknown on node n1"
    assert not cluster.nodes["n1"].drain
    cluster.store.close()


async def test_node_faults_drain_and_keep_the_first_reason(store_url: str) -> None:
    cluster, job, _, _ = await started(store_url)
    node = cluster.nodes[job.batch_host]
    await cluster.node_faults(node, [pb.NodeHealthEvent(reason="GPU 3 XID 79", time=5.0)])
    await cluster.node_faults(node, [pb.NodeHealthEvent(reason="GPU 1 lost")])
    assert node.drain and node.reason == "GPU 3 XID 79" and node.reason_time == 5.0
    assert node.state == pb.NodeState.NODE_STATE_DRAINING  # its job still runs
    wire = node.to_wire()
    assert wire.reason_user == "root" and wire.reason_uid == 0
    cluster.store.close()


async def test_update_node_checks_who_and_what(store_url: str) -> None:
    cluster, _, _, _ = await started(store_url)
    with pytest.raises(PermissionDenied):
        await cluster.update_node(
            ALICE, pb.UpdateNodeRequest(names=["n1"], state="DRAIN", reason="x")
        )
    with pytest.raises(InvalidRequest, match="reason"):
        await cluster.update_node(ROOT, pb.UpdateNodeRequest(names=["n1"], state="DRAIN"))
    with pytest.raises(InvalidRequest, match="state"):
        await cluster.update_node(ROOT, pb.UpdateNodeRequest(names=["n1"], state="REBOOT"))
    await cluster.update_node(ROOT, pb.UpdateNodeRequest(names=["n2"], state="DRAIN", reason="fan"))
    assert cluster.nodes["n2"].drain and cluster.nodes["n2"].reason == "fan"
    assert cluster.nodes["n2"].state == pb.NodeState.NODE_STATE_DRAIN
    cluster.store.close()


async def test_idle_gpus_flag_and_clear(store_url: str) -> None:
    cluster, job, disp, _ = await started(store_url, "flag")
    await report(cluster, job, kind=Update.KIND_IDLE_GPUS, time=123.0)
    assert job.idle_gpus_since == 123.0 and job.reason == "IdleGPUs"
    assert job.state == js.RUNNING and not disp.signalled
    await report(cluster, job, kind=Update.KIND_IDLE_GPUS, time=0)
    assert job.idle_gpus_since == 0 and job.reason == "None"
    cluster.store.close()


async def test_idle_gpus_cancel_policy_cancels(store_url: str) -> None:
    cluster, job, disp, _ = await started(store_url, "cancel")
    await report(cluster, job, kind=Update.KIND_IDLE_GPUS, time=50.0)
    assert job.state == js.COMPLETING
    assert [r.terminate for _, r in disp.signalled] == [True]
    await report(cluster, job, kind=Update.KIND_EXITED, exit_signal=15, signalled_by_request=True)
    assert job.state == js.CANCELLED
    cluster.store.close()


async def test_idle_gpus_requeue_policy_requeues(store_url: str) -> None:
    cluster, job, disp, _ = await started(store_url, "requeue")
    await report(cluster, job, kind=Update.KIND_IDLE_GPUS, time=50.0)
    assert job.state == js.RUNNING and [r.terminate for _, r in disp.signalled] == [True]
    await report(cluster, job, kind=Update.KIND_EXITED, exit_signal=15, signalled_by_request=True)
    assert job.state == js.PENDING and job.restart_count == 1
    cluster.store.close()


async def allocation(store_url: str) -> tuple[Cluster, pb.Job, RecordingDispatcher]:
    disp = RecordingDispatcher()
    cluster = make_cluster(config(), store_url, clock=ManualClock(), dispatcher=disp)  # type: ignore[arg-type]
    await register_all(cluster)
    job = await cluster.submit(
        ALICE,
        pb.JobSpec(
            work_dir="/tmp", name="salloc", allocation_only=True, nodes_min=2, time_limit_s=60
        ),
    )
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    return cluster, job, disp


async def test_allocation_runs_nothing_and_hosts_steps(store_url: str) -> None:
    cluster, job, disp = await allocation(store_url)
    assert job.state == js.RUNNING and not disp.launched  # no batch script to launch
    step = await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id, ntasks=4, argv=["x"]))
    assert step.step_id == 0 and step.nodelist == "n[1-2]" and step.ntasks == 4
    with pytest.raises(PermissionDenied):
        await cluster.create_step(Identity("bob", 1001, 1001), pb.StepSpec(job_id=job.job_id))
    await cluster.complete_step(
        ALICE, pb.CompleteStepRequest(job_id=job.job_id, step_id=0, exit_code=3)
    )
    assert job.steps[0].state == js.FAILED and job.steps[0].exit_code == 3
    await cluster.complete_job(ALICE, pb.CompleteJobRequest(job_id=job.job_id))
    assert job.state == js.COMPLETED and not cluster.nodes["n1"].job_ids
    cluster.store.close()


async def test_scancel_of_a_step_and_of_an_allocation(store_url: str) -> None:
    cluster, job, disp = await allocation(store_url)
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    out = await cluster.cancel(
        ALICE, pb.CancelJobsRequest(steps=[pb.StepRef(job_id=job.job_id, step_id=0)])
    )
    assert out[0].ok and job.steps[0].state == js.CANCELLED and job.state == js.RUNNING
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    assert {(n, r.step_id) for n, r in disp.signalled} == {("n1", 0), ("n2", 0)}
    bad = await cluster.cancel(
        ALICE, pb.CancelJobsRequest(steps=[pb.StepRef(job_id=job.job_id, step_id=9)])
    )
    assert not bad[0].ok
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))
    assert job.state == js.CANCELLED and job.steps[1].state == js.CANCELLED
    cluster.store.close()


async def test_allocation_past_its_limit_times_out(store_url: str) -> None:
    cluster, job, _ = await allocation(store_url)
    cluster.clock.advance(61)  # type: ignore[attr-defined]
    await cluster.enforce_allocation_limits()
    assert job.state == js.TIMEOUT and job.reason == "TimeLimit"
    cluster.store.close()


async def test_a_batch_job_that_ends_takes_its_steps_elsewhere_along(
    store_url: str,
) -> None:
    disp = RecordingDispatcher()
    cluster = make_cluster(config(), store_url, clock=ManualClock(), dispatcher=disp)  # type: ignore[arg-type]
    await register_all(cluster)
    job = await cluster.submit(
        ALICE, pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", name="t", nodes_min=2)
    )
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    await report(cluster, job, kind=Update.KIND_EXITED)
    assert job.state == js.COMPLETED and job.steps[0].state == js.CANCELLED
    other = {a.node for a in job.allocations} - {job.batch_host}
    kills = [(n, r.terminate) for n, r in disp.signalled if not r.remove_checkpoint]
    assert kills == [(other.pop(), True)]
    # ended for good: its batch host removes its checkpoint directory (issue 25)
    removals = [(n, r.job_id) for n, r in disp.signalled if r.remove_checkpoint]
    assert removals == [(job.batch_host, job.job_id)]
    cluster.store.close()


async def test_reports_about_a_cancelled_job_end_it_cancelled(store_url: str) -> None:
    cluster, job, _, _ = await started(store_url)
    node = job.batch_host
    await cluster.cancel(ALICE, pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job.job_id])))
    assert job.state == js.COMPLETING
    await report(cluster, job, kind=Update.KIND_LAUNCH_FAILED, end_reason=Update.END_PROLOG_FAILED)
    assert job.state == js.CANCELLED
    assert cluster.nodes[node].drain  # the prolog still failed there
    cluster.store.close()


async def test_a_step_ends_once_every_node_says_its_tasks_are_gone(
    store_url: str,
) -> None:
    cluster, job, _ = await allocation(store_url)
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    for node, code, state in (("n1", 3, js.RUNNING), ("n2", 0, js.FAILED)):
        upd = Update(job_id=job.job_id, kind=Update.KIND_STEP_ENDED, step_id=0, exit_code=code)
        await cluster.report_status(pb.ReportJobStatusRequest(node=node, updates=[upd]))
        assert job.steps[0].state == state
    assert job.steps[0].exit_code == 3 and job.state == js.RUNNING
    cluster.store.close()


async def test_a_requeued_runs_steps_end_with_it_and_free_the_next_run(store_url: str) -> None:
    # submitit's checkpoint path: `scontrol requeue` from inside the job; the batch
    # script's exit is reported before its step's tasks are said gone. The step must
    # not stay RUNNING into the next run, where srun's new step would find the nodes
    # busy until the time limit (seen in CI, about 1 run in 8)
    cluster, job, _, _ = await started(store_url)
    await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    ran_on = job.batch_host
    await cluster.update_hold(
        ALICE,
        pb.UpdateJobRequest(job_ids=[job.job_id], action=pb.JOB_UPDATE_REQUEUE),
    )
    await report(cluster, job, kind=Update.KIND_EXITED, exit_signal=15)
    assert job.state == js.PENDING and job.restart_count == 1
    assert [s.state for s in job.steps] == [js.CANCELLED]
    late = Update(job_id=job.job_id, kind=Update.KIND_STEP_ENDED, step_id=0, exit_signal=9)
    await cluster.report_status(pb.ReportJobStatusRequest(node=ran_on, updates=[late]))
    assert [s.state for s in job.steps] == [js.CANCELLED]  # the late report changes nothing
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    assert job.state == js.RUNNING
    step = await cluster.create_step(ALICE, pb.StepSpec(job_id=job.job_id))
    assert step.state == js.RUNNING  # the next run's step gets the nodes
    cluster.store.close()
