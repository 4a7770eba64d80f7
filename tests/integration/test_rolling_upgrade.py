"""A rolling upgrade from the last release to this tree while jobs run (issue 35;
docs/upgrading.md, docs/operations.md "Upgrade").

The last release of compat/releases.toml is built from its commit into a venv of its own
(oldrelease.py). A 3-node cluster runs on it: ctld, every noded and the commands of that
release, its config written by that release's code. A 1-node batch job and a 2-node job
whose srun runs a task on each node write a numbered line every half second until the
test says stop; a third job waits on the first (afterok). Then, as the runbook says:
ctld is stopped, this tree's ``corral db upgrade`` migrates the store, this tree's ctld
starts on the same config and store; the commands of both releases work against it
(and submit jobs that this ctld runs on the old nodeds); each noded in turn is restarted
as this tree's, each taking over the jobs it finds, while they run. Every job
completes, with its output whole and each task's lines from one process, none restarts
and sacct shows one run each; every node ends on this version.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from corral import __version__
from corral.localcluster.layout import ctld_name
from corral.testing.cluster import ISOLATION_ENV, ClusterFactory, LocalCluster
from corral.testing.harness import wait_for
from ctld.control import versions
from tests.conftest import BIN
from tests.integration.oldrelease import Installed, last_release
from tests.integration.test_daemon_operations import Tail

pytestmark = [
    # the first run builds the release's venv (tens of seconds from pip's cache)
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get(ISOLATION_ENV) == "container", reason="the release runs from its venv"
    ),
]

NODES = 3
MAX_LINES = 600  # a bound: the jobs stop at the test's word, long before this
TASKS = [("b", "0"), ("r", "0"), ("r", "1")]  # the batch job's, and the srun's two tasks
LATE_S = 15.0  # a noded restart holds a stream for a second or two; shared cores, more


class ReleaseCluster(LocalCluster):
    """A LocalCluster whose config file is written by the release it starts on (its
    keys are the ones that release reads; the new daemons must read them too)."""

    release_python: str = ""

    def write_config(self) -> None:
        super().write_config()  # ports, directories, credentials
        layout = {
            "state_dir": str(self.state_dir),
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "heartbeat_timeout_s": self.heartbeat_timeout_s,
            "kill_wait_s": self.kill_wait_s,
            "grpc_port": self.grpc_port,
            "http_port": self.http_port,
            "node_port": self.node_port,
            "socket_path": self.socket,
        }
        render = (
            "import json, pathlib, sys\n"
            "from corral.localcluster.configfile import config_text\n"
            "from corral.localcluster.layout import Layout\n"
            "args = json.loads(sys.argv[1])\n"
            "state_dir = pathlib.Path(args.pop('state_dir'))\n"
            "sys.stdout.write(config_text(Layout(state_dir, **args)))\n"
        )
        text = subprocess.run(
            [self.release_python, "-c", render, json.dumps(layout)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        self.config_path.write_text(text)


class Commands:
    """The commands of one release (its bin directory) against the cluster."""

    def __init__(self, cluster: LocalCluster, bindir: pathlib.Path, cwd: pathlib.Path) -> None:
        self.cluster, self.bindir, self.cwd = cluster, bindir, cwd
        self.env = {**cluster.env(), "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def __call__(self, *argv: str) -> str:
        done = subprocess.run(
            [str(self.bindir / argv[0]), *argv[1:]],
            cwd=self.cwd,
            env=self.env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{self.bindir / argv[0]} {argv[1:]}: {done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def release() -> Installed:
    installed = last_release()
    said = subprocess.run(
        [str(installed.bin / "corral"), "--version"], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert said == ["corral", installed.version], (
        f"release {installed.version} ({installed.commit}) says {said}: a release's commit "
        "sets corral.__version__ to its version"
    )
    return installed


@pytest.fixture
def cluster(release: Installed) -> Iterator[ReleaseCluster]:
    factory = ClusterFactory(cls=ReleaseCluster)

    def on_release(c: Any) -> None:
        c.python = c.release_python = release.python  # every daemon, until upgraded

    try:
        yield factory(
            on_release,
            nodes=NODES,
            gpus_per_node=0,
            isolation="loopback",
            # ctld's restart (the migration and the start, ~10 s on two busy cores) stays
            # well inside the nodes' fence time: no node needs to ask its peers
            heartbeat_interval_s=1.0,
            heartbeat_timeout_s=30.0,
        )
    finally:
        factory.close()


def _jobs(old: Commands, stop: pathlib.Path) -> tuple[str, str, str]:
    """The batch job on node01, the 2-node srun job (its batch host node01 too), and a
    job waiting for the first: submitted with the release's sbatch."""
    loop = (
        f"i=0; while [ ! -e {stop} ] && [ $i -lt {MAX_LINES} ]; do i=$((i+1)); "
        'echo "{} $i $$ $(date +%s.%N)"; sleep 0.5; done'
    )
    batch = old(
        "sbatch", "--parsable", "-w", "node01", "-o", "batch-%j.out",
        "--wrap", loop.format("b 0"),
    ).strip()  # fmt: skip
    task = loop.format("r $SLURM_PROCID")
    steps = old(
        "sbatch", "--parsable", "-N2", "-w", "node01,node02", "-o", "srun-%j.out",
        "--wrap", f"srun -N2 --ntasks-per-node=1 sh -c '{task}'",
    ).strip()  # fmt: skip
    after = old(
        "sbatch", "--parsable", f"--dependency=afterok:{batch}", "-o", "after-%j.out",
        "--wrap", "echo after $SLURM_JOB_ID",
    ).strip()  # fmt: skip
    return batch, steps, after


def _quick_job(cmd: Commands, node: str, what: str) -> str:
    job_id = cmd(
        "sbatch", "--parsable", "-w", node, "-o", f"{what}-%j.out", "--wrap", f"echo {what}"
    )
    return job_id.strip()


def _tasks(tail: Tail) -> dict[tuple[str, str], list[tuple[float, int, str, float]]]:
    """Each task's lines so far: (arrived, number, pid, written), by (kind, rank); any
    other line (a kill's notice) under ("?", line)."""
    out: dict[tuple[str, str], list[tuple[float, int, str, float]]] = {}
    for lines in list(tail.arrived.values()):
        for arrived, line in list(lines):
            fields = line.split()
            if len(fields) != 5 or (fields[0], fields[1]) not in TASKS:
                out.setdefault(("?", line), [])
                continue
            kind, rank, i, pid, stamp = fields
            out.setdefault((kind, rank), []).append((arrived, int(i), pid, float(stamp)))
    return out


def _more_lines(tail: Tail, each: int, timeout: float = 30.0) -> None:
    """Wait until each of the three tasks has written ``each`` more lines (its stream
    goes on)."""
    start = {key: len(lines) for key, lines in _tasks(tail).items()}
    assert sorted(start) == sorted(TASKS), sorted(start)

    def grown() -> bool:
        now = _tasks(tail)
        return all(len(now[key]) >= start[key] + each for key in TASKS)

    wait_for(grown, timeout, f"{each} more lines from every task")


def test_a_rolling_upgrade_from_the_last_release_costs_running_jobs_nothing(
    cluster: ReleaseCluster, release: Installed, tmp_path: pathlib.Path
) -> None:
    c = cluster
    work = tmp_path / "work"
    work.mkdir()
    old, new = Commands(c, release.bin, work), Commands(c, BIN, work)
    stop = work / "stop"
    batch, steps, after = _jobs(old, stop)
    for job_id in (batch, steps):
        c.wait_state(job_id, "RUNNING", timeout=60)
    assert c.state(after) == "PENDING"
    tail = Tail(work / f"batch-{batch}.out", work / f"srun-{steps}.out")
    try:
        wait_for(lambda: set(TASKS) <= set(_tasks(tail)), 60, "the first lines")
        nodes = old("sinfo", "-h", "-N", "-o", "%N %v").split()
        assert nodes == [w for n in c.node_names for w in (n, release.version)], nodes
        assert c.client().get_cluster_info({})["version"] == release.version

        # ctld first: stopped, the store migrated by the new corral, the new ctld started
        c.stop_process("ctld")
        new("corral", "db", "upgrade", "-f", str(c.config_path))
        head = new("corral", "db", "head").strip()
        assert new("corral", "db", "current", "-f", str(c.config_path)).strip() == head
        c.interpreters[ctld_name(0)] = str(BIN / "python")
        c.start_ctld(timeout=60)
        c.wait_nodes_up(60)
        assert c.client().get_cluster_info({})["version"] == __version__
        # the commands of both releases against it, and jobs it runs on the old nodeds
        quick = [
            _quick_job(cmd, "node03", f"{name}-sbatch")
            for name, cmd in (("old", old), ("new", new))
        ]
        for cmd in (old, new):
            listed = cmd("squeue", "-h", "-o", "%i %T")
            assert f"{batch} RUNNING" in listed and f"{after} PENDING" in listed, listed
            assert cmd("sinfo", "-h", "-o", "%D").split() == [str(NODES)]
            assert f"JobId={steps} " in cmd("scontrol", "show", "job", steps)
            assert cmd("srun", "-N1", "-w", "node03", "echo", "srun-ok").strip() == "srun-ok"
        for job_id in quick:
            c.wait_state(job_id, "COMPLETED", timeout=60)
        _more_lines(tail, 2)

        # then each noded, one at a time, while the jobs run
        for index in reversed(range(NODES)):
            name = c.node_names[index]
            c.stop_process(name)
            c.interpreters[name] = str(BIN / "python")
            c.start_node(index, timeout=60)
            _more_lines(tail, 3)  # every task's stream goes on through the new noded

        stop.touch()
        for job_id in (batch, steps, after, *quick):
            job = c.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", timeout=90)
            assert job["state"] == "JOB_STATE_COMPLETED", f"job {job_id}: {job}"
            assert int(job.get("restartCount", 0)) == 0, f"job {job_id} restarted"
            for cmd in (old, new):
                runs = cmd("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State")
                assert runs.split() == [f"{job_id}|COMPLETED"], runs
    finally:
        tail.stop()
    _whole(tail)
    assert (work / f"after-{after}.out").read_text() == f"after {after}\n"
    nodes = new("sinfo", "-h", "-N", "-o", "%N %v").split()
    assert nodes == [w for n in c.node_names for w in (n, __version__)], nodes
    ctld_log = (c.state_dir / "log" / "ctld.log").read_text()
    assert versions.judge(release.version) in (versions.SAME, versions.WINDOW)
    assert "outside ctld's window" not in ctld_log  # the release is inside it


def _whole(tail: Tail) -> None:
    """Every task's lines numbered 1..n without a gap or a repeat, from one process, none
    delivered more than LATE_S after it was written."""
    tasks = _tasks(tail)
    assert sorted(tasks) == sorted(TASKS), sorted(tasks)
    for key, lines in tasks.items():
        numbers = sorted(i for _, i, _, _ in lines)
        assert numbers == list(range(1, len(numbers) + 1)), f"{key}: lines lost or doubled"
        # the test waited for lines after each step (1, +2 past ctld, +3 past each noded):
        # the stream went on through every restart; how many more came is the machine's
        assert 12 <= len(numbers) < MAX_LINES, f"{key}: {len(numbers)} lines"
        pids = {pid for _, _, pid, _ in lines}
        assert len(pids) == 1, f"{key}: written by {pids}: its process changed"
        late = max(arrived - written for arrived, _, _, written in lines)
        assert late <= LATE_S, f"{key}: a line arrived {late:.1f} s after it was written"
