"""srun's task stream (corral/stepstream.py, noded/stream.py) against real daemons:
nothing runs without the step credential's proof for this very connection, and srun
itself needs neither grpc nor protobuf."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from corral import stepstream as ss
from corral.testing.cluster import ClusterFactory, LocalCluster
from tests.conftest import BIN, wait_for


@pytest.fixture(scope="module")
def one(module_cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    yield module_cluster_factory(nodes=1, gpus_per_node=0)


def hello(address: str) -> tuple[socket.socket, bytes]:
    host, port, tls = ss.split_address(address)
    assert not tls
    sock = socket.create_connection((host, port), timeout=10)
    kind, payload = read_frame(sock)
    assert kind == ss.HELLO and payload.startswith(ss.MAGIC)
    return sock, payload[len(ss.MAGIC) :]


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    head = recv_exactly(sock, ss.HEADER.size)
    length, kind = ss.HEADER.unpack(head)
    return kind, recv_exactly(sock, length - 1)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def answer(sock: socket.socket) -> tuple[int, bytes]:
    """noded's answer to a START (REFUSED then EOF, or STARTED)."""
    kind, payload = read_frame(sock)
    if kind == ss.REFUSED:
        try:
            assert sock.recv(1) == b""  # and the connection is closed
        finally:
            sock.close()
    return kind, payload


@pytest.fixture
def step(one: LocalCluster, tmp_path: pathlib.Path) -> Iterator[tuple[dict, str, pathlib.Path]]:
    """A running batch job and a step of it (made as its owner), with the credential
    CreateStep gave us; the step's command would create ``marker``."""
    api = one.client()
    spec = {"name": "holder", "script": "#!/bin/sh\nsleep 60\n", "workDir": str(tmp_path)}
    job_id = api.submit_job({"spec": spec})["jobId"]
    wait_for(
        lambda: (
            one.client().get_jobs({"filter": {"jobIds": [job_id]}})["jobs"][0].get("state")
            == "JOB_STATE_RUNNING"
        ),
        30,
        "the job to run",
    )
    marker = tmp_path / "ran"
    reply = api.create_step({"spec": {"jobId": job_id, "argv": ["touch", str(marker)]}})
    yield reply, job_id, marker
    api.cancel_jobs({"filter": {"jobIds": [job_id]}})


def body(reply: dict, forged: bool = False) -> dict:
    node = reply["step"]["nodes"][0]
    return {
        "jobId": int(reply["job"]["jobId"]),
        "stepId": int(reply["step"].get("stepId", 0)),
        "node": node["node"],
        "environment": {"LD_PRELOAD": "/tmp/not-mine.so"} if forged else {},
        "cwd": "/tmp",
    }


def test_the_stream_refuses_anything_before_a_proven_start(
    step: tuple[dict, str, pathlib.Path],
) -> None:
    reply, _, marker = step
    address = reply["step"]["nodes"][0]["streamAddress"]
    # a frame other than START first: refused, closed, nothing read after it
    sock, _ = hello(address)
    sock.sendall(ss.frame(ss.STDIN, b"echo hi\n"))
    kind, why = answer(sock)
    assert kind == ss.REFUSED and b"must begin with START" in why
    # a frame larger than anything noded accepts: refused without reading it
    sock, _ = hello(address)
    sock.sendall(ss.HEADER.pack(ss.MAX_FRAME + 1, ss.START))
    kind, why = answer(sock)
    assert kind == ss.REFUSED and b"limit" in why
    # a START with no proof, or with a proof made with a guessed credential
    for credential in ("", "0" * 64):
        sock, nonce = hello(address)
        sock.sendall(ss.start_frame(credential, nonce, body(reply, forged=True)))
        kind, why = answer(sock)
        assert kind == ss.REFUSED and b"step credential does not match" in why
    assert not marker.exists()


def test_a_recorded_start_cannot_be_replayed(step: tuple[dict, str, pathlib.Path]) -> None:
    reply, _, marker = step
    address = reply["step"]["nodes"][0]["streamAddress"]
    credential = reply["stepCredential"]
    # the creator's own START on a connection, recorded on the way
    sock, nonce = hello(address)
    recorded = ss.start_frame(credential, nonce, body(reply))
    sock.sendall(recorded)
    kind, _ = answer(sock)
    assert kind == ss.STARTED
    # played again on a new connection (a new nonce) it proves nothing, and a body
    # changed under the original proof (another environment) fails the same way
    tampered = recorded.replace(b'"cwd":"/tmp"', b'"cwd":"/var"')
    assert tampered != recorded
    for frame in (recorded, tampered):
        again, _ = hello(address)
        again.sendall(frame)
        kind, why = answer(again)
        assert kind == ss.REFUSED and b"step credential does not match" in why
    up = ss.FrameMac(ss.session_keys(credential, nonce)[0])
    sock.sendall(up.seal(ss.STDIN_EOF))
    wait_for(marker.exists, 20, "the real step's task to run")
    sock.close()


def overlap_step(one: LocalCluster, job_id: str, argv: list[str]) -> tuple[dict, dict]:
    """A step of ``job_id`` running ``argv`` with its stdin from srun; (reply, body)."""
    spec = {"jobId": job_id, "argv": argv, "overlap": True}
    reply = one.client().create_step({"spec": spec})
    return reply, {**body(reply), "stdinRanks": [0]}


def proven_stream(reply: dict, start: dict) -> tuple[socket.socket, ss.FrameMac, ss.FrameMac]:
    """A connection with a proven START, as the step's srun: (socket, its tags out, in)."""
    credential = reply["stepCredential"]
    sock, nonce = hello(reply["step"]["nodes"][0]["streamAddress"])
    sock.sendall(ss.start_frame(credential, nonce, start))
    up, down = (ss.FrameMac(k) for k in ss.session_keys(credential, nonce))
    kind, payload = read_frame(sock)
    assert kind == ss.STARTED, payload
    checked = bytearray(payload)
    down.open(kind, checked)  # noded's frames carry their tags too
    return sock, up, down


def closed(sock: socket.socket) -> bool:
    sock.settimeout(20)
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    sock.close()
    return True


def test_a_frame_injected_after_start_ends_the_step_unheard(
    step: tuple[dict, str, pathlib.Path], one: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """An on-path peer writing into a proven plaintext stream (no tag, a made-up tag,
    or a genuine frame played again): noded takes none of it, closes the stream and
    ends the step, so the task never reads the injected input."""
    _, job_id, _ = step
    for attack in ("no tag", "a made-up tag", "a replayed frame"):
        out = tmp_path / f"heard-{attack.replace(' ', '-')}"
        argv = ["sh", "-c", f'while read x; do echo "$x" >> {out}; done']
        reply, start = overlap_step(one, job_id, argv)
        sock, up, _ = proven_stream(reply, start)
        genuine = up.seal(ss.STDIN, b"mine\n")
        sock.sendall(genuine)
        wait_for(lambda o=out: o.exists() and o.read_text() == "mine\n", 20, "the real input")
        if attack == "no tag":
            sock.sendall(ss.frame(ss.STDIN, b"injected\n"))
        elif attack == "a made-up tag":
            sock.sendall(ss.frame(ss.STDIN, b"injected\n" + os.urandom(ss.TAG_BYTES)))
        else:
            sock.sendall(genuine)
        assert closed(sock)  # noded ended the stream
        assert out.read_text() == "mine\n", attack


def test_srun_imports_neither_grpc_nor_protobuf(one: LocalCluster, tmp_path: pathlib.Path) -> None:
    # -X importtime on the interpreter: the command's own script may start it with -I,
    # which ignores PYTHONPROFILEIMPORTTIME (corral launchers)
    env = one.env()
    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(BIN / "srun"), "-n1", "echo", "hello"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello\n"
    imported = {
        line.split("|")[-1].strip() for line in out.stderr.splitlines() if "import time:" in line
    }
    assert "client.taskstream" in imported  # the list is the real one
    heavy = sorted(m for m in imported if m.split(".")[0] in ("grpc", "google", "asyncio"))
    assert not heavy, f"srun imported {heavy[:10]}"


def test_srun_speaks_tls_to_the_stream_when_the_cluster_asks(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0, tls_clients=True)
    node = c.client().get_nodes({})["nodes"][0]["name"]
    env = c.env()

    def srun(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "srun"), "-n1", "echo", "over tls"],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # no CA to check the node's certificate with (no config file here): a clear refusal
    out = srun(CORRAL_CONF=str(tmp_path / "none.toml"))
    assert out.returncode == 1
    assert f"{node}: its task stream speaks TLS: set CORRAL_CTLD_CA" in out.stderr
    for extra in ({}, {"CORRAL_CTLD_CA": os.fspath(c.tls_dir / "ca.crt")}):
        out = srun(**extra)  # the CA from the config's tls.dir, or named
        assert out.returncode == 0, out.stderr
        assert out.stdout == "over tls\n"
    # the stream address says TLS, and plaintext to it gets nothing
    address = c.client().get_jobs({})["jobs"][-1]["steps"][0]["nodes"][0]["streamAddress"]
    assert address.startswith(ss.TLS_PREFIX)
    host, port, _ = ss.split_address(address)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"\0" * 64)
        sock.settimeout(10)
        with pytest.raises((ConnectionError, OSError)):
            read_frame(sock)
