"""Power saving and cloud nodes on real daemons (issue 27).

The cluster has one ordinary node and two cloud nodes (``state = "cloud"``): those start
powered down. The resume program here is what a boot would be: it starts the named
nodes' noded (as LocalCluster does); the suspend program stops them. A job for the
cloud partition runs the resume program, the node registers, the job runs; idle past
suspend_time, the suspend program stops the node and sinfo shows it ``idle~``. A node
that never registers goes DOWN, ``ResumeTimeout reached``, and the job starts on the
other one.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from corral.auth.tls import issue
from corral.localcluster.pidfiles import stop_by_pidfile
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN, Commands, wait_for

CLOUD = {"cloud1": "127.0.0.20", "cloud2": "127.0.0.21"}

RESUME = """#!/bin/sh
# boots the nodes of hostlist $1: each one's noded, in its own session, with a pid file
state={state}
for name in $({bin}/scontrol show hostnames "$1"); do  # Slurm scripts' own idiom
  echo "resume $name" >> $state/power.log
  if [ "$name" = "{never}" ]; then continue; fi  # this one never comes up
  case $name in cloud1) addr={addr1} ;; cloud2) addr={addr2} ;; *) exit 2 ;; esac
  setsid {python} -m noded -f $state/corral.toml --name $name --listen $addr --port 0 \\
    --ready-file $state/run/$name.ready >> $state/log/$name.log 2>&1 < /dev/null &
  echo $! > $state/run/$name.pid
done
echo "booting $1"
"""

SUSPEND = """#!/bin/sh
# powers the nodes of hostlist $1 off: stops each one's noded
state={state}
for name in $({bin}/scontrol show hostnames "$1"); do  # Slurm scripts' own idiom
  echo "suspend $name" >> $state/power.log
  kill $(cat $state/run/$name.pid) 2>/dev/null
  rm -f $state/run/$name.pid $state/run/$name.ready
done
"""


class CloudCluster(LocalCluster):
    """Only the ordinary nodes are started and waited for: the cloud nodes are off."""

    def wait_nodes_up(self, timeout: float = 30.0) -> None:
        def up() -> bool:
            nodes = self.client().get_nodes({}).get("nodes", [])
            return all(
                n.get("state") == "NODE_STATE_IDLE"
                for n in nodes
                if n.get("name") in self.node_names
            )

        wait_for(up, timeout, "the ordinary nodes to register")


@pytest.fixture
def factory() -> Iterator[ClusterFactory]:
    with ClusterFactory(CloudCluster) as f:
        yield f
        for started in f.started:  # the nodeds the resume program started
            print(f"----- power.log -----\n{chr(10).join(power_log(started))}")
            for name in CLOUD:
                stop_by_pidfile(started.state_dir, name)
                print(f"----- {name} log -----\n{started.log_tail(name, 30)}")


def make(
    factory: ClusterFactory,
    tmp_path: pathlib.Path,
    *,
    never: str = "",
    cloud_shown: bool = True,
    **power: Any,
) -> tuple[LocalCluster, Commands]:
    """A cluster with two cloud nodes; ``cloud_shown``: with ``private_data = ["cloud"]``
    (Slurm's PrivateData=cloud), so sinfo lists them while they are powered down."""
    state = factory.base / f"cluster{len(factory.started)}"
    state.mkdir(parents=True)
    programs = {}
    for kind, text in (("resume", RESUME), ("suspend", SUSPEND)):
        path = state / f"{kind}.sh"
        path.write_text(
            text.format(
                state=state,
                python=sys.executable,
                bin=BIN,
                never=never,
                addr1=CLOUD["cloud1"],
                addr2=CLOUD["cloud2"],
            )
        )
        path.chmod(0o755)
        programs[kind] = path
    keys = {"suspend_time": 4, "suspend_timeout": 2, "resume_timeout": 30, **power}
    extra = f"""
[[nodes]]
names = "cloud[1-2]"
cpus = 2
memory_mb = 2048
state = "cloud"

[[partitions]]
name = "cloud"
nodes = "cloud[1-2]"

[power]
resume_program = "{programs["resume"]}"
suspend_program = "{programs["suspend"]}"
suspend_exc_parts = ["debug"]
""" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    c = factory(
        nodes=1,
        gpus_per_node=0,
        extra_config=extra,
        heartbeat_interval_s=1.0,
        controller_config='private_data = ["cloud"]' if cloud_shown else "",
    )
    for name, addr in CLOUD.items():  # provisioned with its node certificate, as an image is
        issue(str(c.tls_dir), name, [addr])
    work = tmp_path / "work"
    work.mkdir()
    return c, Commands(c, work)


def sinfo_states(cmd: Commands) -> dict[str, str]:
    out = cmd("sinfo", "-N", "-h", "-o", "%N %t").stdout
    return dict(line.split() for line in out.splitlines())  # type: ignore[misc]


def power_log(c: LocalCluster) -> list[str]:
    log = c.state_dir / "power.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_job_boots_a_cloud_node_which_powers_down_again_when_idle(
    factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c, cmd = make(factory, tmp_path)
    assert sinfo_states(cmd) == {"node01": "idle", "cloud1": "idle~", "cloud2": "idle~"}
    show = cmd("scontrol", "show", "node", "cloud1").stdout
    assert "State=IDLE+CLOUD+POWERED_DOWN" in show
    job = cmd("sbatch", "--parsable", "-p", "cloud", "--wrap", "hostname").stdout.strip()

    def powering_up() -> dict[str, Any] | None:
        j = c.job(job)
        return j if j.get("reason") == "PoweringUp" else None

    waiting = wait_for(powering_up, 20, "the job to wait for a power-up")
    assert float(waiting.get("expectedStart", 0)) > 0  # its forecast counts the boot
    ran = c.wait_state(job, "COMPLETED", timeout=60)
    host = ran["batchHost"]
    assert host in CLOUD and f"resume {host}" in power_log(c)
    # idle past suspend_time: the suspend program stops it, sinfo shows it powered down
    wait_for(lambda: f"suspend {host}" in power_log(c), 30, "the suspend program")
    wait_for(lambda: sinfo_states(cmd)[host] == "idle~", 30, f"{host} to show idle~")
    assert sinfo_states(cmd)["node01"] == "idle"  # suspend_exc_parts


def test_a_node_that_never_registers_goes_down_and_the_job_runs_on_another(
    factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c, cmd = make(factory, tmp_path, never="cloud1", resume_timeout=6)
    job = cmd("sbatch", "--parsable", "-p", "cloud", "--wrap", "hostname").stdout.strip()
    ran = c.wait_state(job, "COMPLETED", timeout=90)
    assert ran["batchHost"] == "cloud2"
    assert power_log(c)[0] == "resume cloud1"  # the scheduler's first choice, never up
    reasons = cmd("sinfo", "-R", "-h", "-o", "%n|%E").stdout
    assert "cloud1|ResumeTimeout reached" in reasons
    assert sinfo_states(cmd)["cloud1"] == "down~"


def test_powered_down_nodes_stay_so_across_a_ctld_restart(
    factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c, cmd = make(factory, tmp_path)
    cmd("scontrol", "power", "down", "node01")  # an ordinary node, powered down by hand
    wait_for(lambda: "suspend node01" in power_log(c), 20, "the suspend program")
    wait_for(lambda: sinfo_states(cmd)["node01"] == "idle~", 30, "node01 to show idle~")
    c.stop_process("ctld")
    c.start_ctld()
    # past the heartbeat timeout: a node that is off is not judged silent (never down~)
    deadline = time.monotonic() + c.heartbeat_timeout_s + 3
    while time.monotonic() < deadline:
        assert sinfo_states(cmd) == {"node01": "idle~", "cloud1": "idle~", "cloud2": "idle~"}
        time.sleep(0.5)  # a bounded watch that nothing changes, not a synchronisation
    assert "POWERED_DOWN" in cmd("scontrol", "show", "node", "node01").stdout
    # and power saving goes on: a cloud job boots its node as before the restart
    job = cmd("sbatch", "--parsable", "-p", "cloud", "--wrap", "hostname").stdout.strip()
    assert c.wait_state(job, "COMPLETED", timeout=60)["batchHost"] in CLOUD


def test_listings_leave_powered_down_cloud_nodes_out_unless_private_data_says_cloud(
    factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    # Slurm 22.05 (slurm.conf PrivateData): without "cloud", cloud nodes do not appear
    # in sinfo's output unless powered on; a node named is still shown, and the energy
    # report still counts what they save
    c, cmd = make(factory, tmp_path, cloud_shown=False)
    assert sinfo_states(cmd) == {"node01": "idle"}
    assert "cloud1" not in cmd("scontrol", "show", "node").stdout
    assert "State=IDLE+CLOUD+POWERED_DOWN" in cmd("scontrol", "show", "node", "cloud1").stdout
    report = cmd("corral", "report", "--power").stdout
    assert "cloud1 " in report and "cloud2 " in report, report
    job = cmd("sbatch", "--parsable", "-p", "cloud", "--wrap", "hostname").stdout.strip()
    ran = c.wait_state(job, "COMPLETED", timeout=60)
    assert ran["batchHost"] in CLOUD
