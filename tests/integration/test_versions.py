"""ctld's compatibility window through real daemons (ctld/versions.py, docs/upgrading.md).

A noded or a command of a newer major version than ctld's is refused with a message
that names both versions and the fix (the node stays out, the command exits 1); an
older one outside the window is served, with a warning in ctld's log; the commands say
their version over HTTP and gRPC alike. The other versions are this tree's own code
with ``corral.__version__`` set otherwise before anything reads it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import corral.api
import corral.rest
from corral import __version__
from corral.errors import InvalidRequest, VersionMismatch
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

pytestmark = [pytest.mark.timeout(120)]

MAJOR, MINOR = (int(p) for p in __version__.split(".")[:2])
NEXT_MAJOR = f"{MAJOR + 1}.0.0"


def interpreter_of(tmp_path: pathlib.Path, version: str) -> str:
    """A python that runs ``-m MODULE ARGS`` as corral ``version`` (LocalCluster's
    interpreters run daemons so)."""
    code = (
        "import runpy, sys, corral\n"
        f"corral.__version__ = {version!r}\n"
        "module = sys.argv[2]\n"
        "sys.argv = [sys.argv[0], *sys.argv[3:]]\n"
        "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    )
    shim = tmp_path / f"python-{version}"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{code}" "$@"\n')
    shim.chmod(0o755)
    return str(shim)


def command_of(
    cmd: Commands, version: str, name: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Command ``name`` as corral ``version`` would run it."""
    code = (
        f"import sys, corral; corral.__version__ = {version!r}\n"
        f"from client.{name} import main\n"
        f"sys.argv = [{name!r}, *sys.argv[1:]]\n"
        "sys.exit(main())\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cmd.cwd,
        env=cmd.env,
        text=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def cmd(cluster_factory: ClusterFactory, tmp_path: pathlib.Path) -> Commands:
    c = cluster_factory(nodes=2, gpus_per_node=0)
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


def test_a_noded_of_a_newer_major_is_refused_and_says_why(
    cmd: Commands, tmp_path: pathlib.Path
) -> None:
    c = cmd.cluster
    c.stop_process("node02")
    c.interpreters["node02"] = interpreter_of(tmp_path, NEXT_MAJOR)
    c.start_node(1, wait=False)
    node_log = c.state_dir / "log" / "node02.log"
    wait_for(lambda: "ctld refused" in node_log.read_text(), 30, "node02's refusal")
    said = node_log.read_text()
    assert f"noded node02 {NEXT_MAJOR} is of a newer major version than ctld" in said
    assert "Upgrade ctld first" in said
    ctld_log = (c.state_dir / "log" / "ctld.log").read_text()
    assert "noded refused: newer major version" in ctld_log
    # ctld took nothing from it: node02 is still the noded of this version it had
    nodes = cmd("sinfo", "-h", "-N", "-o", "%N %v").stdout.split("\n")
    assert f"node02 {__version__}" in nodes, nodes
    assert not (c.state_dir / "run" / "node02.ready").exists()


def test_a_command_of_a_newer_major_is_refused_over_http(cmd: Commands) -> None:
    squeue = command_of(cmd, NEXT_MAJOR, "squeue")
    assert squeue.returncode == 1, squeue
    assert f"this command {NEXT_MAJOR} is of a newer major version than ctld" in squeue.stderr
    assert "Upgrade ctld first" in squeue.stderr
    assert command_of(cmd, __version__, "squeue").returncode == 0  # the same, as itself


def test_a_command_of_a_newer_major_is_refused_over_grpc(
    cmd: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corral.api, "__version__", NEXT_MAJOR)
    client = cmd.cluster.grpc_client()
    try:
        with pytest.raises(VersionMismatch, match="newer major version"):
            client.get_cluster_info({})
    finally:
        client.close()


def test_an_older_command_is_served_and_ctld_warns_once(cmd: Commands) -> None:
    old = "0.9.0"  # before 1.0: out of any window from 1.1 on (1.0: older major)
    for _ in range(2):
        done = command_of(cmd, old, "sbatch", "--wrap", "true")
        assert done.returncode == 0, done.stderr
    ctld_log = cmd.cluster.state_dir / "log" / "ctld.log"
    wait_for(lambda: "outside ctld's window" in ctld_log.read_text(), 10, "the warning")
    warnings = [ln for ln in ctld_log.read_text().splitlines() if "outside ctld's window" in ln]
    assert len(warnings) == 1 and old in warnings[0], warnings


def test_a_previous_minor_command_is_served_without_a_word(cmd: Commands) -> None:
    if MINOR == 0:
        pytest.skip("a .0 release's window is its own minor only")
    previous = f"{MAJOR}.{MINOR - 1}.0"
    done = command_of(cmd, previous, "sbatch", "--wrap", "true")
    assert done.returncode == 0, done.stderr
    assert "outside ctld's window" not in (cmd.cluster.state_dir / "log" / "ctld.log").read_text()


def test_a_newer_command_whose_request_this_ctld_cannot_read_is_told_to_upgrade_ctld(
    cmd: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = f"{MAJOR}.{MINOR + 1}.0"
    monkeypatch.setattr(corral.rest, "__version__", newer)
    # a field of a later release, which this ctld's proto does not have
    with pytest.raises(InvalidRequest) as err:
        corral.rest.post(cmd.cluster.socket, "GetJobs", {"fieldOfLaterRelease": 1}, [], 10)
    assert f"the command is corral {newer}, ctld {__version__}: upgrade ctld first" in str(
        err.value
    )
