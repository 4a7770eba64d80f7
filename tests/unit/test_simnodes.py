"""The node simulator's own logic: scripts, oversubscription checks, commands."""

from __future__ import annotations

import asyncio

from corral.localcluster.simnodes import SimulatedNodes, parse_script
from corral.wire import corral_pb2 as pb


def _job(script: str, env: dict[str, str] | None = None) -> pb.Job:
    return pb.Job(job_id=1, spec=pb.JobSpec(script=script, environment=env or {}))


def test_script_directives_win_then_environment_then_sleep_then_default() -> None:
    s = parse_script(_job("#!/bin/sh\n#SIM runtime=7.5 exit=3 rss_mb=512\nsleep 99\n"), {}, 1.0)
    assert (s.runtime_s, s.exit_code, s.rss_mb) == (7.5, 3, 512.0)
    env = {"CORRAL_SIM_RUNTIME": "4", "CORRAL_SIM_EXIT": "2"}
    s = parse_script(_job("#!/bin/sh\nsleep 99\n", env), {}, 1.0)
    assert (s.runtime_s, s.exit_code) == (4.0, 2)
    assert parse_script(_job("#!/bin/sh\necho hi; sleep 12\n"), {}, 1.0).runtime_s == 12.0
    assert parse_script(_job("#!/bin/sh\ntrue\n"), {}, 0.25).runtime_s == 0.25
    # a malformed directive is ignored, like a shell comment
    assert parse_script(_job("#SIM runtime=soon\n"), {}, 2.0).runtime_s == 2.0


def _launch(sim: SimulatedNodes, job_id: int, node: str, gpus: list[int], cpus: int) -> None:
    job = pb.Job(job_id=job_id, batch_host=node, num_cpus=cpus, num_gpus=len(gpus))
    job.spec.script = "#SIM runtime=60"
    job.allocations.add(node=node, cpus=cpus, mem_mb=1024, gpu_indices=gpus)
    sim.launch(pb.LaunchJobRequest(job=job))


def test_launches_beyond_a_node_are_counted_as_oversubscription() -> None:
    async def scenario() -> dict[str, object]:
        sim = SimulatedNodes("127.0.0.1:1", [("n1", 8, 4096, 4, "NVIDIA H100 80GB HBM3")])
        _launch(sim, 1, "n1", [0, 1], 4)
        _launch(sim, 2, "n1", [2, 3], 4)
        assert sim.stats()["oversubscribed"] == 0
        _launch(sim, 3, "n1", [1], 1)  # GPU 1 is job 1's; and a ninth CPU
        stats = sim.stats()
        sim.signal(pb.SignalJobRequest(job_id=1, terminate=True))
        assert sim.stats()["running"] == 2 and sim.nodes["n1"].outbox[0].exit_signal == 15
        for job_id in (2, 3):
            sim.signal(pb.SignalJobRequest(job_id=job_id, terminate=True))
        return stats

    stats = asyncio.run(scenario())
    assert stats["oversubscribed"] == 1 and stats["peak_gpus_in_use"] == 5
    assert "GPUs held [1]" in str(stats["violations"])


def test_control_names_unknown_nodes_and_commands() -> None:
    sim = SimulatedNodes("127.0.0.1:1", [("n1", 8, 4096, 0, "")])
    assert sim.control({"cmd": "crash", "nodes": "n[1-2]"}) == {
        "ok": False,
        "error": "unknown nodes: ['n2']",
    }
    assert not sim.control({"cmd": "explode"})["ok"]
    assert sim.control({"cmd": "crash", "nodes": "n1"})["ok"] and sim.nodes["n1"].crashed
