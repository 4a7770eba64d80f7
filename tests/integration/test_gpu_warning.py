"""A GPU health warning on real daemons (docs/reliability.md, planned disruptions): the
fake GPU backend reports a degrading GPU (correctable ECC errors rising) on a node of a
``-N 2-3 --elastic --requeue`` job; the node drains with a "GPU health warning" reason,
not DOWN, and the job is signalled, saves, and is requeued onto the nodes it kept."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for
from tests.integration.test_elastic import start_stopper, steps_log


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Any:
    def make(**kw: Any) -> tuple[LocalCluster, Commands]:
        state = cluster_factory.base / f"cluster{len(cluster_factory.started)}"
        c = cluster_factory(
            nodes=3,
            gpus_per_node=1,  # the fake backend, whose state file injects the warning
            heartbeat_interval_s=1.0,
            heartbeat_timeout_s=5.0,
            noded_config=f'checkpoint_dir = "{state / "checkpoints"}"',
            **kw,
        )
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return c, Commands(c, work)

    return make


def inject(cluster: LocalCluster, node: str, events: list[dict[str, Any]]) -> None:
    path = cluster.state_dir / "spool" / node / "fake-gpus.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"events": events}))
    tmp.replace(path)  # noded never reads half a file


def test_a_gpu_health_warning_drains_the_node_and_the_job_saves_and_is_requeued(
    make_cluster: Any,
) -> None:
    cluster, cmd = make_cluster(controller_config="checkpoint_cleanup = false")
    job_id, job, ckpt = start_stopper(cluster, cmd, "tr")
    assert job["numNodes"] == 3
    warned = next(n for n in cluster.node_names if n != job["batchHost"])
    began = time.monotonic()
    inject(cluster, warned, [{"kind": "warning", "gpu": 0, "detail": "correctable ECC +500/poll"}])
    reason = "GPU health warning: GPU 0 correctable ECC +500/poll"
    wait_for(lambda: reason in cmd("sinfo", "-R", "-h", "-o", "%E").stdout, 20, "the node to drain")
    line = cmd("sinfo", "-R", "-h", "-o", "%E|%N").stdout.strip()
    assert line == f"{reason}|{warned}"
    # a drain, not DOWN: the job's processes there are not killed, it is signalled
    assert cmd("sinfo", "-h", "-o", "%t", "-n", warned).stdout.strip() in ("drng", "drain")
    # it saved at the signal (it saves on nothing else) and exited: requeued at once,
    # long before the lead time, onto the two nodes it kept
    wait_for(lambda: any(e["run"] == "1" for e in steps_log(ckpt)), 30, "the second run")
    assert time.monotonic() - began < 30
    again = cmd.job(job_id)
    assert again["restartCount"] == 1 and warned not in again["nodelist"]
    assert again["numNodes"] == 2
    # the warning is the recorded cause of the signal and requeue
    causes = {e["cause"] for e in again["events"]}
    assert f"node:{warned} warning" in causes, again["events"]
    done = cmd.wait_state(job_id, "COMPLETED", timeout=60)
    assert done["restartCount"] == 1
    log = steps_log(ckpt)
    first = [int(e["step"]) for e in log if e["run"] == "0"]
    second = [int(e["step"]) for e in log if e["run"] == "1"]
    assert second[0] in (first[-1], first[-1] + 1) and second[-1] == 30  # no step lost
    out = (cmd.cwd / f"tr-{job_id}.out").read_text()
    assert "signal SIGUSR1: checkpoint at step" in out and "resumed from step" in out
    fields = "Interruptions,InterruptCauses"
    line = cmd("sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields).stdout.strip()
    assert line == "1|drain:1", line
    # still drained with its warning until an operator resumes it
    assert cmd("sinfo", "-h", "-o", "%t", "-n", warned).stdout.strip() == "drain"
