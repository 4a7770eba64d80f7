"""Power saving at scale (issue 27): the real ctld with 200 nodes played by the node
simulator, whose suspend program crashes the nodes named (they stop answering, as a
powered-off machine does) and whose resume program revives them (they boot and
register). Idle nodes are powered down; a burst of jobs wakes as many as it needs,
each job starting once its nodes registered; the rest stay off."""

from __future__ import annotations

import pathlib
import sys

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

pytestmark = pytest.mark.timeout(300)

PROGRAM = """#!/bin/sh
# tells the node simulator to {cmd} the nodes of hostlist $1 (a power {what})
exec {python} -c '
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
s.sendall(json.dumps({{"cmd": "{cmd}", "nodes": sys.argv[2]}}).encode() + b"\\n")
reply = s.recv(65536)
sys.exit(0 if b"true" in reply else 1)
' {sock} "$1"
"""


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    state = cluster_factory.base / f"cluster{len(cluster_factory.started)}"
    state.mkdir(parents=True)
    sock = state / "run" / "simnodes.sock"
    paths = {}
    for cmd, what in (("crash", "off"), ("revive", "on")):
        path = state / f"{cmd}.sh"
        path.write_text(PROGRAM.format(cmd=cmd, what=what, python=sys.executable, sock=sock))
        path.chmod(0o755)
        paths[cmd] = path
    extra = f"""
[power]
suspend_program = "{paths["crash"]}"
resume_program = "{paths["revive"]}"
suspend_time = 3
suspend_timeout = 1
resume_timeout = 60
suspend_rate = 0
resume_rate = 0
"""
    return cluster_factory(
        start_timeout=120,
        nodes=200,
        simulated=True,
        heartbeat_interval_s=2.0,
        heartbeat_timeout_s=30.0,
        extra_config=extra,
        sim_default_runtime_s=2.0,
    )


def powers(c: LocalCluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in c.client().get_nodes({}).get("nodes", []):
        key = str(n.get("power", "NODE_POWER_ON")).removeprefix("NODE_POWER_")
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_idle_nodes_power_down_and_a_burst_wakes_what_it_needs(
    cluster: LocalCluster, tmp_path: pathlib.Path
) -> None:
    c = cluster
    wait_for(lambda: powers(c).get("POWERED_DOWN") == 200, 60, "every idle node powered down")
    cmd = Commands(c, tmp_path)
    # 30 jobs of one whole node each, at once (an array): 30 nodes must wake
    out = cmd("sbatch", "--parsable", "--array=1-30", "-N1", "--exclusive", "--wrap", "true")
    array = out.stdout.strip()

    def all_done() -> bool:  # squeue lists an array's tasks until they all ended
        return (
            not cmd("squeue", "-h", "-t", "all", "-j", array, "-o", "%T")
            .stdout.replace("COMPLETED", "")
            .split()
        )

    wait_for(all_done, 120, "the burst to run on the woken nodes", interval=0.5)
    nodes = c.client().get_nodes({}).get("nodes", [])
    assert all(float(n.get("poweredDownS", 0)) > 0 for n in nodes)  # each was off a while
    resumes = metric(c, "corral_power_resumes_total")
    assert 30 <= resumes <= 60, resumes  # about what the burst needed, not all 200
    # and the woken nodes power down again once idle
    wait_for(lambda: powers(c).get("POWERED_DOWN") == 200, 60, "the woken nodes back off")


def metric(c: LocalCluster, name: str) -> float:
    for line in c.scrape().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")
