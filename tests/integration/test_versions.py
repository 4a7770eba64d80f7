"""ctld's compatibility window through real daemons (ctld/control/versions.py, docs/upgrading.md).

A noded or a command of a newer major version than ctld's is refused with a message
that names both versions and the fix (the node stays out, the command exits 1); an
older one outside the window is served, with a warning in ctld's log; the commands say
their version over HTTP and gRPC alike. The other versions are this tree's own code
with ``corral.__version__`` set otherwise before anything reads it.
"""

from __future__ import annotations

import pathlib
import shlex
import socket
import subprocess
import sys
from typing import Any

import pytest

import corral.api
import corral.rest
from corral import __version__
from corral.errors import InvalidRequest, VersionMismatch
from corral.testing.cluster import ClusterFactory
from ctld.control import versions
from tests.conftest import Commands, wait_for
from tests.integration.realusers import Users, as_user, command

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


def _post_as(c: Any, pw: Any, version: str, request: bytes = b"{}") -> tuple[int, str]:
    """GetClusterInfo on ctld's socket as user ``pw``, saying ``version``: (status, body)."""

    def body() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(c.socket)
            s.sendall(
                b"POST /corral.v1.Controller/GetClusterInfo HTTP/1.1\r\nHost: ctld\r\n"
                + f"Content-Type: application/json\r\nContent-Length: {len(request)}\r\n".encode()
                + f"x-corral-version: {version}\r\n".encode()
                + b"Connection: close\r\n\r\n"
                + request
            )
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        head, _, rest = reply.partition(b"\r\n\r\n")
        print(head.split()[1].decode(), rest.decode(errors="replace"))

    code, out, err = as_user(pw, body)
    assert code == 0, err
    status, _, text = out.partition(" ")
    return int(status), text


def test_what_a_second_user_says_as_a_version_costs_only_that_user(
    cmd: Commands, users: Users
) -> None:
    c = cmd.cluster
    status, text = _post_as(c, users.bob, NEXT_MAJOR)
    assert status == 409 and "VersionMismatch" in text, text
    hostile = [
        'x" event=forged level=error',  # a log field of its own
        "9" * 4400 + ".1.0",  # past int()'s digit limit
        "1." + "9" * 60 + ".0",
        "-1.-1.0",
        "\u00e9\u00e9.1",
    ]
    hostile += [f"0.{n}.0" for n in range(200)]  # more versions than the log's bound
    for version in hostile:
        for request in (b"{}", b'{"unknownField": 1}'):  # the second: a parse error's hint
            status, text = _post_as(c, users.bob, version, request)
            assert status in (200, 400), (version[:80], status, text)  # 400: aiohttp's limits
    assert int(_post_as(c, users.bob, __version__)[0]) == 200
    code, _, err = command(c, users.alice, "sbatch", "--parsable", "--wrap", "true")
    assert code == 0, err  # nobody else noticed
    lines = (c.state_dir / "log" / "ctld.log").read_text().splitlines()
    fields = [shlex.split(ln) for ln in lines if "forged" in ln]
    assert fields and not [f for f in fields if "event=forged" in f], fields  # quoted, whole
    warned = [ln for ln in lines if "outside ctld's window" in ln]
    assert 1 <= len(warned) <= versions.MAX_WARNED, len(warned)
    assert not [ln for ln in lines if "Traceback" in ln or "internal error" in ln]
