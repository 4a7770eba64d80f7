"""A peer a moment slow to open a connection costs no job (the daemons' channels).

ctld reaches a noded over a channel that reconnects fast after the noded was away
(corral.limits.GRPC_RECONNECT_OPTIONS). Its options once made gRPC give each connection
attempt 200 ms to finish its handshake: a noded restarted, then busy for a moment as
ctld's next LaunchJob opened a new connection, failed the launch, and the job was
requeued. Here the restarted noded is stopped for a second as a job is submitted: the
launch must wait for it, and the job run once.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands

pytestmark = pytest.mark.timeout(120)


def test_a_launch_to_a_restarted_noded_busy_for_a_second_waits_and_runs_once(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    first = cmd("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true").stdout.strip()
    cmd.wait_state(first, "COMPLETED")  # ctld's channel to node01 connected once
    c.kill_process("node01")
    c.start_node(0)  # a new noded: ctld's next call opens a new connection
    noded = c.procs["node01"].pid
    log = c.state_dir / "log" / "ctld.log"
    offset = log.stat().st_size
    os.kill(noded, signal.SIGSTOP)
    try:
        # started at submit: ctld's LaunchJob opens its connection to the stopped noded
        job = cmd("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true").stdout.strip()
        time.sleep(1.0)  # noded busy for a second: the fault's length, not a synchronisation
    finally:
        os.kill(noded, signal.SIGCONT)
    done = cmd.wait_state(job, "COMPLETED", "FAILED", "NODE_FAIL", timeout=60)
    assert done["state"] == "JOB_STATE_COMPLETED", done
    assert "restartCount" not in done, done
    assert b"launch failed" not in log.read_bytes()[offset:]
