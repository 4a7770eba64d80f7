"""Power saving in ctld, on virtual time with real programs (issue 27): the node power
states, suspend after suspend_time at suspend_rate, a job that needs powered-down nodes
waking them (reason PoweringUp, its forecast counting resume_timeout), the timeouts and
failing programs ending DOWN with the reason, and scontrol's POWER_* states."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from corral.config import parse_config
from corral.errors import InvalidRequest
from corral.identity import Identity
from corral.reasons import Reason
from corral.testing.inprocess import ManualClock, make_cluster, registration
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.model import nodestate as ns
from ctld.model.nodes import POWER_ON, POWERED_DOWN, POWERING_DOWN, POWERING_UP, NodeRecord

CLOUD: dict[bool, dict[str, str]] = {True: {"state": "cloud"}, False: {}}
ALICE = Identity("alice", 1000, 1000)
ADMIN = Identity("daemon", 1, 1)


def program(tmp_path: pathlib.Path, name: str, body: str = "") -> str:
    """A power program that logs its argument to ``<name>.log``, then runs ``body``."""
    path = tmp_path / f"{name}.sh"
    path.write_text(f'#!/bin/sh\necho "$1" >> {tmp_path}/{name}.log\necho did "$1"\n{body}\n')
    path.chmod(0o755)
    return str(path)


def calls(tmp_path: pathlib.Path, name: str) -> list[str]:
    log = tmp_path / f"{name}.log"
    return log.read_text().split() if log.exists() else []


def config(
    tmp_path: pathlib.Path,
    *,
    resume: str = "",
    cloud: bool = True,
    cloud_nodes: str = "c[1-2]",
    private_data: tuple[str, ...] = (),
    **power: Any,
) -> Any:
    return parse_config(
        {
            "controller": {
                "operators": ["daemon"],
                "administrators": ["daemon"],
                "private_data": list(private_data),
            },
            "heartbeat": {"interval_s": 1.0, "timeout_s": 10.0},
            "nodes": [
                {"names": cloud_nodes, "cpus": 8, "memory_mb": 16384, **CLOUD[cloud]},
                {"names": "n1", "cpus": 8, "memory_mb": 16384},
            ],
            "partitions": [{"name": "p", "nodes": f"{cloud_nodes},n1", "default": True}],
            "power": {
                "resume_program": program(tmp_path, "resume", resume),
                "suspend_program": program(tmp_path, "suspend"),
                "resume_fail_program": program(tmp_path, "failed"),
                "resume_timeout": 60,
                "suspend_timeout": 10,
                **power,
            },
        }
    )  # fmt: skip


async def make(tmp_path: pathlib.Path, **kw: Any) -> tuple[Cluster, ManualClock]:
    clock = ManualClock()
    cluster = make_cluster(config(tmp_path, **kw), f"sqlite:///{tmp_path}/c.db", clock=clock)
    for name, node in cluster.nodes.items():
        if node.power == POWER_ON:
            await cluster.register_node(registration(cluster, name, gpus=0))
    return cluster, clock


async def settle(cluster: Cluster) -> None:
    await cluster.schedule_pass()
    while cluster._tasks or cluster.power._tasks:
        await asyncio.gather(*list(cluster._tasks), *list(cluster.power._tasks))


async def tick(cluster: Cluster) -> None:
    await cluster.power.tick()
    while cluster.power._tasks:
        await asyncio.gather(*list(cluster.power._tasks))


def spec(**kw: Any) -> pb.JobSpec:
    base: dict[str, Any] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    return pb.JobSpec(**(base | kw))


def test_the_power_events() -> None:
    cfg = parse_config({"nodes": [{"names": "n1", "cpus": 2}]})
    n = NodeRecord(name="n1", config=cfg.nodes[0], partitions=[])
    ns.transition(n, "registered", cause="t", now=1.0)
    ns.transition(n, "powering_down", cause="power:suspend_time", now=2.0)
    assert n.power == POWERING_DOWN and not n.schedulable and n.state == pb.NODE_STATE_IDLE
    ns.transition(n, "powered_down", cause="power:suspend_timeout", now=3.0)
    assert n.power == POWERED_DOWN and n.state == pb.NODE_STATE_IDLE
    ns.transition(n, "powering_up", cause="sched:job=1", now=13.0)
    assert n.powered_down_for(20.0) == 10.0 and n.to_wire().power == POWERING_UP
    ns.transition(n, "resume_failed", cause="power:resume_timeout", now=80.0, reason="")
    assert n.down and n.reason == "ResumeTimeout reached" and n.power == POWERED_DOWN
    assert n.state == pb.NODE_STATE_DOWN and n.last is not None
    with pytest.raises(Exception, match="impossible"):
        ns.transition(n, "powering_up", cause="t", now=81.0)  # DOWN: RESUME first
    ns.transition(n, "registered", cause="t", now=90.0)  # it booted after all
    assert n.power == POWER_ON and not n.down and n.schedulable


async def test_a_job_wakes_cloud_nodes_and_runs_once_they_register(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock = await make(tmp_path)
    assert cluster.nodes["c1"].to_wire().cloud and cluster.nodes["c1"].power == POWERED_DOWN
    job = await cluster.submit(ALICE, spec(nodes_min=2))
    await settle(cluster)
    assert job.state == js.PENDING and job.reason == Reason.POWERING_UP
    assert job.expected_start >= clock() + 59  # resume_timeout counted in its forecast
    waking = set(job.forecast_nodes.replace("c[1-2]", "c1,c2").split(",")) - {"n1"}
    assert waking <= {"c1", "c2"} and waking
    await tick(cluster)
    assert {n for n in waking if cluster.nodes[n].power == POWERING_UP} == waking
    assert calls(tmp_path, "resume")  # one call, a Slurm hostlist
    for name in waking:  # the resume program's nodes boot and register
        await cluster.register_node(registration(cluster, name, gpus=0))
    await settle(cluster)
    assert job.state == js.RUNNING and all(cluster.nodes[n].power == POWER_ON for n in waking)


async def test_the_passes_while_a_burst_boots_wake_nothing_more(tmp_path: pathlib.Path) -> None:
    # the jobs past the first name the same node in their forecasts (one reservation):
    # the next passes give them the nodes already booting, not more powered down
    cluster, clock = await make(tmp_path, cloud_nodes="c[1-9]")
    busy = await cluster.submit(ALICE, spec(cpus_per_task=8))  # n1, the one node on
    await settle(cluster)
    jobs = [await cluster.submit(ALICE, spec(exclusive=True)) for _ in range(4)]
    await settle(cluster)
    await tick(cluster)
    booting = {n.name for n in cluster.nodes.values() if n.power == POWERING_UP}
    assert len(booting) == 4 and cluster.power.resumes == 4 and busy.state == js.RUNNING
    first = min(booting)
    await cluster.register_node(registration(cluster, first, gpus=0))  # one is up already
    for _ in range(3):  # passes while the others boot
        clock.advance(1)
        await settle(cluster)
        await tick(cluster)
    assert cluster.power.resumes == 4
    assert {n.name for n in cluster.nodes.values() if n.power == POWERING_UP} == booting - {first}
    assert all(j.reason == Reason.POWERING_UP for j in jobs if j.state == js.PENDING)


async def test_a_node_missing_resume_timeout_goes_down_and_the_job_runs_elsewhere(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock = await make(tmp_path)
    busy = await cluster.submit(ALICE, spec(cpus_per_task=8))  # takes n1, the one node on
    await settle(cluster)
    job = await cluster.submit(ALICE, spec())
    await settle(cluster)
    await tick(cluster)
    (first,) = [n for n in ("c1", "c2") if cluster.nodes[n].power == POWERING_UP]
    assert job.reason == Reason.POWERING_UP and busy.state == js.RUNNING
    clock.advance(61)
    await tick(cluster)
    node = cluster.nodes[first]
    assert node.down and node.reason == "ResumeTimeout reached" and node.power == POWERED_DOWN
    assert calls(tmp_path, "failed") == [first]
    await settle(cluster)
    await tick(cluster)
    other = "c2" if first == "c1" else "c1"
    assert cluster.nodes[other].power == POWERING_UP
    await cluster.register_node(registration(cluster, other, gpus=0))
    await settle(cluster)
    assert job.state == js.RUNNING and [a.node for a in job.allocations] == [other]


async def test_a_failing_resume_program_puts_the_node_down_with_its_words(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _ = await make(tmp_path, resume="echo no capacity in region >&2; exit 3")
    busy = await cluster.submit(ALICE, spec(cpus_per_task=8))
    job = await cluster.submit(ALICE, spec())
    await settle(cluster)
    assert busy.state == js.RUNNING
    await tick(cluster)
    down = [n for n in cluster.nodes.values() if n.down]
    assert (
        len(down) == 1 and down[0].reason == "ResumeProgram failed: exit 3: no capacity in region"
    )
    assert job.state == js.PENDING


async def test_idle_nodes_are_suspended_at_suspend_rate_then_powered_down(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock = await make(
        tmp_path, cloud=False, suspend_time=120, suspend_rate=2, suspend_exc_nodes="n1"
    )
    assert all(n.power == POWER_ON for n in cluster.nodes.values())
    for name in ("c1", "c2"):
        await cluster.register_node(registration(cluster, name, gpus=0))
    await tick(cluster)
    clock.advance(121)
    await tick(cluster)
    assert cluster.nodes["c1"].power == POWERING_DOWN and cluster.nodes["n1"].power == POWER_ON
    assert calls(tmp_path, "suspend") == ["c[1-2]"]
    clock.advance(11)
    await tick(cluster)
    assert cluster.nodes["c2"].power == POWERED_DOWN and not cluster.nodes["c2"].registered
    clock.advance(100)
    await cluster.check_heartbeats()  # a powered-down node is not "not responding"
    assert not cluster.nodes["c2"].down


async def test_scontrol_power_states(tmp_path: pathlib.Path) -> None:
    cluster, _ = await make(tmp_path, cloud=False)
    for name in ("c1", "c2"):
        await cluster.register_node(registration(cluster, name, gpus=0))
    job = await cluster.submit(ALICE, spec(cpus_per_task=8))
    await settle(cluster)
    host = job.batch_host
    with pytest.raises(Exception, match="operator"):
        await cluster.update_node(ALICE, pb.UpdateNodeRequest(names=[host], state="POWER_DOWN"))
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=[host], state="POWER_DOWN"))
    node = cluster.nodes[host]
    assert node.power_down_pending and node.power == POWER_ON  # "!" until its job ends
    idle = next(n for n in ("c1", "c2", "n1") if n != host)
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=[idle], state="power_down"))
    assert cluster.nodes[idle].power == POWERING_DOWN
    with pytest.raises(InvalidRequest, match="powering down"):
        await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=[idle], state="POWER_UP"))
    await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=[host], state="POWER_UP"))
    assert not node.power_down_pending  # POWER_UP cancels a pending power-down
    with pytest.raises(InvalidRequest, match="Invalid node state"):
        await cluster.update_node(ADMIN, pb.UpdateNodeRequest(names=[host], state="POWER_SIDEWAYS"))
    await tick(cluster)  # the suspend program it ran


async def test_hours_and_energy_saved_in_getnodes_metrics_and_report(
    tmp_path: pathlib.Path,
) -> None:
    from google.protobuf.json_format import MessageToDict
    from prometheus_client import CollectorRegistry

    from client.report_power import format_power
    from client.views.node import Node
    from ctld.telemetry.metrics import ClusterCollector
    from ctld.telemetry.metrics_text import exposition

    cluster, clock = await make(tmp_path, idle_watts=300, powered_down_watts=10)
    clock.advance(3600)  # the cloud nodes have been off for an hour since ctld started
    # as corral report --power asks: with the powered-down cloud nodes listings leave out
    wire = {n.name: n for n in cluster.queries.node_list([], with_hidden=True)}
    assert wire["c1"].powered_down_s == pytest.approx(3600)
    assert wire["c1"].energy_saved_j == pytest.approx(3600 * 290)
    assert wire["n1"].powered_down_s == 0
    registry = CollectorRegistry()
    registry.register(ClusterCollector(cluster))
    text = exposition(registry).decode()
    assert 'corral_node_powered_down_seconds_total{node="c1"} 3600.0' in text
    assert 'corral_partition_energy_saved_joules_total{partition="p"} 2088000.0' in text
    assert 'corral_node_power_state{node="c2",power="POWERED_DOWN"} 1.0' in text
    report = format_power([Node(MessageToDict(n)) for n in wire.values()])  # type: ignore[arg-type]
    assert "c1               p                      1.00       0.29" in report
    assert report.splitlines()[-1].split() == ["total", "2.00", "0.58"]


async def test_power_down_force_requeues_its_jobs_then_powers_it_down(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _ = await make(tmp_path, cloud=False)
    job = await cluster.submit(ALICE, spec(cpus_per_task=8, requeue=True))
    await settle(cluster)
    host = job.batch_host
    req = pb.UpdateNodeRequest(names=[host], state="POWER_DOWN_FORCE")
    await cluster.update_node(ADMIN, req)
    await tick(cluster)
    assert job.state == js.PENDING and job.restart_count == 1  # requeued
    node = cluster.nodes[host]
    assert node.power == POWERING_DOWN and not node.down and not node.job_ids
    assert calls(tmp_path, "suspend") == [host]


def test_idle_on_node_suspend_clears_drain_and_down() -> None:
    cfg = parse_config({"nodes": [{"names": "n1", "cpus": 2}]})
    n = NodeRecord(name="n1", config=cfg.nodes[0], partitions=[])
    ns.transition(n, "registered", cause="t", now=1.0)
    ns.transition(n, "drained", cause="t", now=2.0, reason="flaky fan")
    ns.transition(n, "powering_down", cause="t", now=3.0)
    ns.transition(n, "powered_down", cause="t", now=4.0, reason=ns.IDLE_ON_SUSPEND)
    assert not n.drain and n.reason == "" and n.power == POWERED_DOWN


async def test_a_burst_wakes_a_node_for_each_job(tmp_path: pathlib.Path) -> None:
    """Forecasts are made job by job, so 5 jobs may name the same node that is off:
    each gets its own like it, and 5 nodes power up at once."""
    cfg = parse_config(
        {
            "nodes": [{"names": "c[01-20]", "cpus": 4, "memory_mb": 1000, "state": "cloud"}],
            "partitions": [{"name": "p", "nodes": "c[01-20]", "default": True}],
            "power": {"resume_program": program(tmp_path, "resume")},
        }
    )
    cluster = make_cluster(cfg, f"sqlite:///{tmp_path}/c.db", clock=ManualClock())
    jobs = [await cluster.submit(ALICE, spec(exclusive=True)) for _ in range(5)]
    await settle(cluster)
    assert all(j.reason == Reason.POWERING_UP for j in jobs)
    await tick(cluster)
    booting = [n for n, node in cluster.nodes.items() if node.power == POWERING_UP]
    assert len(booting) == 5 and calls(tmp_path, "resume") == ["c[01-05]"]


async def test_a_burst_powers_up_at_resume_rate(tmp_path: pathlib.Path) -> None:
    """resume_rate (Slurm's ResumeRate): at most that many nodes powered up in any
    minute; the rest wait their turn, in the order the jobs asked for them."""
    cfg = parse_config(
        {
            "nodes": [{"names": "c[01-20]", "cpus": 4, "memory_mb": 1000, "state": "cloud"}],
            "partitions": [{"name": "p", "nodes": "c[01-20]", "default": True}],
            "power": {
                "resume_program": program(tmp_path, "resume"),
                "resume_rate": 3,
                "resume_timeout": 600,
            },
        }
    )
    clock = ManualClock()
    cluster = make_cluster(cfg, f"sqlite:///{tmp_path}/c.db", clock=clock)
    jobs = [await cluster.submit(ALICE, spec(exclusive=True)) for _ in range(5)]
    await settle(cluster)
    assert all(j.reason == Reason.POWERING_UP for j in jobs)

    def booting() -> list[str]:
        return sorted(n for n, node in cluster.nodes.items() if node.power == POWERING_UP)

    await tick(cluster)
    assert booting() == ["c01", "c02", "c03"] and calls(tmp_path, "resume") == ["c[01-03]"]
    clock.advance(59)
    await settle(cluster)
    await tick(cluster)
    assert len(booting()) == 3  # the minute is not over
    clock.advance(2)
    await tick(cluster)
    assert booting() == ["c01", "c02", "c03", "c04", "c05"]
    assert calls(tmp_path, "resume") == ["c[01-03]", "c[04-05]"]


async def test_listings_leave_powered_down_cloud_nodes_out(tmp_path: pathlib.Path) -> None:
    # Slurm's PrivateData=cloud: without it, a cloud node is listed only while it is on
    # (or powering up); named, or asked for with with_hidden, it is always answered
    cluster, _ = await make(tmp_path)

    def listed(**kw: Any) -> list[str]:
        return [n.name for n in cluster.node_list([], **kw)]

    assert listed() == ["n1"]
    assert sorted(listed(with_hidden=True)) == ["c1", "c2", "n1"]
    assert [n.name for n in cluster.node_list(["c[1-2]"])] == ["c1", "c2"]
    job = await cluster.submit(ALICE, spec(nodes_min=2))
    await settle(cluster)
    await tick(cluster)  # the resume program runs: the nodes it wakes are listed again
    waking = sorted(n for n in ("c1", "c2") if cluster.nodes[n].power == POWERING_UP)
    assert waking and sorted(listed()) == sorted(["n1", *waking])
    assert job.state == js.PENDING


async def test_private_data_cloud_lists_powered_down_cloud_nodes(tmp_path: pathlib.Path) -> None:
    cluster, _ = await make(tmp_path, private_data=("cloud",))
    assert sorted(n.name for n in cluster.node_list([])) == ["c1", "c2", "n1"]
