"""No operation of the daemons costs a running job anything (issue 35).

Real daemons: 3 nodes on network namespaces (heartbeat 1 s, timeout 5 s), a 1-node
batch job and a 2-node job whose srun runs a task on each node, each writing a line
every half second with its own pid and the time. In each case ctld or a noded goes
away (killed, stopped, or cut off from every node for three heartbeat timeouts) and
comes back while they run; both jobs must keep their processes (every line of a task
from one pid), lose no line, deliver none more than 5 s late, never restart, and end
COMPLETED with one continuous accounting record.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from corral.localcluster.netns import available as netns_available
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.harness import wait_for
from tests.conftest import Commands

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not netns_available()[0], reason="needs network namespaces (root)"),
]

INTERVAL_S, TIMEOUT_S = 1.0, 5.0
OUTAGE_S = 3 * TIMEOUT_S
LINES = 70  # 35 s of work: through any outage here and back
LATE_S = 5.0


class Tail:
    """Reads the jobs' output files as they grow and notes when each line arrived."""

    def __init__(self, *paths: pathlib.Path) -> None:
        self.paths = paths
        self.arrived: dict[pathlib.Path, list[tuple[float, str]]] = {p: [] for p in paths}
        self._offsets = dict.fromkeys(paths, 0)
        self._partial = dict.fromkeys(paths, "")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(0.05)
        self._read()

    def _read(self) -> None:
        for path in self.paths:
            try:
                with path.open("rb") as fh:
                    fh.seek(self._offsets[path])
                    data = fh.read()
            except OSError:
                continue
            if not data:
                continue
            now = time.time()
            self._offsets[path] += len(data)
            text = self._partial[path] + data.decode(errors="replace")
            *lines, self._partial[path] = text.split("\n")
            self.arrived[path] += [(now, line) for line in lines if line]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LocalCluster, Commands]]:
    factory = ClusterFactory()
    try:
        c = factory(
            nodes=3,
            gpus_per_node=0,
            isolation="netns",
            heartbeat_interval_s=INTERVAL_S,
            heartbeat_timeout_s=TIMEOUT_S,
        )
        work = factory.base / "work"
        work.mkdir()
        work.chmod(0o777)
        yield c, Commands(c, work)
    finally:
        factory.close()  # their logs printed: pytest shows them with a failure


def _start_jobs(cmd: Commands) -> tuple[str, str]:
    """The 1-node batch job on node01; the 2-node srun job with its batch host there too."""
    batch = cmd(
        "sbatch",
        "--parsable",
        "-w",
        "node01",
        "-o",
        "batch-%j.out",
        "--wrap",
        f'for i in $(seq 1 {LINES}); do echo "b 0 $i $$ $(date +%s.%N)"; sleep 0.5; done',
    ).stdout.strip()
    task = (
        f"for i in $(seq 1 {LINES}); do "
        'echo "r $SLURM_PROCID $i $$ $(date +%s.%N)"; sleep 0.5; done'
    )
    steps = cmd(
        "sbatch",
        "--parsable",
        "-N2",
        "-w",
        "node01,node02",
        "-o",
        "srun-%j.out",
        "--wrap",
        f"srun -N2 --ntasks-per-node=1 sh -c '{task}'",
    ).stdout.strip()
    for job_id in (batch, steps):
        cmd.wait_state(job_id, "RUNNING", timeout=30)
    return batch, steps


def _check(cmd: Commands, tail: Tail, batch: str, steps: str, outage: tuple[float, float]) -> None:
    for job_id in (batch, steps):
        job = cmd.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", timeout=120)
        assert job["state"] == "JOB_STATE_COMPLETED", f"job {job_id}: {job}"
        assert int(job.get("restartCount", 0)) == 0, f"job {job_id} restarted"
        runs = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,Start")
        rows = [r for r in runs.stdout.splitlines() if r]
        assert len(rows) == 1 and rows[0].split("|")[1] == "COMPLETED", runs.stdout
    tail.stop()
    expected = {("b", "0"): LINES, ("r", "0"): LINES, ("r", "1"): LINES}
    seen: dict[tuple[str, str], list[int]] = {k: [] for k in expected}
    pids: dict[tuple[str, str], set[str]] = {k: set() for k in expected}
    worst = 0.0
    during = 0
    for lines in tail.arrived.values():
        for arrived, line in lines:
            kind, rank, i, pid, stamp = line.split()
            seen[(kind, rank)].append(int(i))
            pids[(kind, rank)].add(pid)
            worst = max(worst, arrived - float(stamp))
            during += outage[0] <= float(stamp) <= outage[1]
    for key, n in expected.items():
        assert sorted(seen[key]) == list(range(1, n + 1)), f"{key}: lines lost or doubled"
        assert len(pids[key]) == 1, f"{key}: written by {pids[key]}: its process changed"
    assert worst <= LATE_S, f"a line arrived {worst:.1f} s after it was written"
    assert during, "no line was written during the outage: the test proved nothing"


def _scenario(
    cluster: tuple[LocalCluster, Commands], outage: Callable[[LocalCluster], None]
) -> None:
    c, cmd = cluster
    batch, steps = _start_jobs(cmd)
    tail = Tail(cmd.cwd / f"batch-{batch}.out", cmd.cwd / f"srun-{steps}.out")
    try:
        wait_for(lambda: sum(len(v) for v in tail.arrived.values()) >= 6, 30, "first lines")
        began = time.time()
        outage(c)
        ended = time.time()
        _check(cmd, tail, batch, steps, (began, ended))
    finally:
        tail.stop()


def _away(c: LocalCluster, stop: Callable[[], None], start: Callable[[], None]) -> None:
    stop()
    time.sleep(OUTAGE_S)  # the outage itself: three heartbeat timeouts with ctld away
    start()


def test_ctld_killed_for_three_timeouts_costs_the_jobs_nothing(cluster: Any) -> None:
    _scenario(cluster, lambda c: _away(c, lambda: c.kill_process("ctld"), c.start_ctld))


def test_ctld_stopped_for_three_timeouts_costs_the_jobs_nothing(cluster: Any) -> None:
    _scenario(cluster, lambda c: _away(c, lambda: c.stop_process("ctld"), c.start_ctld))


def test_noded_killed_on_the_batch_host_costs_the_jobs_nothing(cluster: Any) -> None:
    def outage(c: LocalCluster) -> None:
        c.kill_process("node01")  # the batch job's node, and the srun job's batch host
        time.sleep(1.0)  # a crash, then systemd's restart
        c.start_node(0)

    _scenario(cluster, outage)


def test_noded_stopped_on_the_srun_jobs_other_node_costs_the_jobs_nothing(cluster: Any) -> None:
    def outage(c: LocalCluster) -> None:
        c.stop_process("node02")  # systemctl stop: its jobs run on
        time.sleep(1.0)
        c.start_node(1)

    _scenario(cluster, outage)


def test_every_node_cut_off_from_a_live_ctld_for_three_timeouts_costs_nothing(
    cluster: Any,
) -> None:
    _scenario(
        cluster,
        lambda c: _away(c, lambda: c.cut_controller(), lambda: c.cut_controller(up=True)),
    )
