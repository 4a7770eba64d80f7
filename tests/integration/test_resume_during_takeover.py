"""srun resumes its stream while a restarted noded is still taking over (issue 35).

A new noded attaches to each job's supervisor before its steps are its own. srun,
whose stream broke with the old noded, tries RESUME every half second; one that came
in that window was refused ("runs no tasks ... could not take it over"), and srun ended
the step as a node failure (bench/daemon_restarts.py met it in one restart of six with
33 jobs on the node). Here one job's supervisor is stopped for two seconds, so the
take-over waits on it and srun's tries surely fall in the window: the step must
resume and complete with every line, the slow job run on.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import threading
import time

import pytest

from corral.testing.cluster import ClusterFactory
from corral.testing.harness import wait_for
from tests.conftest import Commands

pytestmark = pytest.mark.timeout(180)

LINES = 80  # 8 s of the step's output, through the restart and back


def _supervisor_of(log: pathlib.Path, job_id: str) -> int:
    for line in log.read_text().splitlines():
        if 'event="job started"' in line and f" job_id={job_id} " in line:
            found = re.search(r" supervisor=(\d+)", line)
            assert found, line
            return int(found.group(1))
    raise AssertionError(f"no start of job {job_id} in {log}")


def test_srun_resuming_while_the_new_noded_attaches_a_slow_supervisor_keeps_its_step(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    slow = cmd("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    task = f"for i in $(seq 1 {LINES}); do echo line $i; sleep 0.1; done"
    step = cmd(
        "sbatch", "--parsable", "-o", "srun-%j.out", "--wrap", f"srun sh -c '{task}'"
    ).stdout.strip()
    for job_id in (slow, step):
        cmd.wait_state(job_id, "RUNNING")
    out = work / f"srun-{step}.out"
    wait_for(lambda: out.exists() and "line 3\n" in out.read_text(), 30, "the step's output")
    log = c.state_dir / "log" / "node01.log"
    supervisor = _supervisor_of(log, slow)
    offset = log.stat().st_size

    c.kill_process("node01")
    os.kill(supervisor, signal.SIGSTOP)  # the next noded's take-over waits on it
    starting = threading.Thread(target=c.start_node, args=(0, 60.0), daemon=True)
    try:
        starting.start()
        wait_for(
            lambda: b"job containment" in log.read_bytes()[offset:], 30, "the new noded's start"
        )
        time.sleep(2.0)  # the supervisor's delay, not a synchronisation: srun tries 4 times
    finally:
        os.kill(supervisor, signal.SIGCONT)
    starting.join(60)
    assert not starting.is_alive(), "the new noded never registered"

    done = cmd.wait_state(step, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED", timeout=60)
    text = out.read_text()
    assert "Node failure" not in text, text[-300:]
    assert [ln for ln in text.splitlines() if ln.startswith("line ")] == [
        f"line {i}" for i in range(1, LINES + 1)
    ], text[-300:]
    assert done["state"] == "JOB_STATE_COMPLETED", done
    assert "restartCount" not in done, done
    assert cmd.job(slow)["state"] == "JOB_STATE_RUNNING"
    assert "srun resumed its step" in log.read_text()[offset:]
