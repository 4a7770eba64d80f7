"""srun's side of the task stream's tags (client/taskstream.py) against a noded played
by the test over a real socket: what srun sends is tagged, and a frame injected into
what it receives ends that node's stream with a clear reason."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from client.taskstream import NodeStream
from corral import stepstream as ss

pytestmark = pytest.mark.timeout(30)


def _read_frame(sock: socket.socket) -> tuple[int, bytearray]:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "closed"
            out += chunk
        return out

    length, kind = ss.HEADER.unpack(exactly(ss.HEADER.size))
    return kind, bytearray(exactly(length - 1))


def test_srun_tags_what_it_sends_and_refuses_an_injected_frame() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, object] = {}

    def noded() -> None:
        conn, _ = listener.accept()
        with conn:
            nonce = os.urandom(ss.NONCE_BYTES)
            conn.sendall(ss.frame(ss.HELLO, ss.MAGIC + nonce))
            kind, payload = _read_frame(conn)
            assert kind == ss.START
            body = bytes(payload[ss.PROOF_BYTES :])
            assert bytes(payload[: ss.PROOF_BYTES]) == ss.proof("cred", nonce, body)
            up, down = (ss.FrameMac(k) for k in ss.session_keys("cred", nonce))
            kind, payload = _read_frame(conn)
            up.open(kind, payload)  # srun's STDIN carries its tag
            seen["stdin"] = bytes(payload)
            conn.sendall(down.seal(ss.STARTED, b'{"masterPort": 1, "pids": [1]}'))
            conn.sendall(down.seal(ss.STDOUT, ss.RANK.pack(0), b"real\n"))
            conn.sendall(ss.frame(ss.STDOUT, ss.RANK.pack(0) + b"forged\n"))  # on the path
            conn.sendall(down.seal(ss.EXIT, ss.EXIT_FIELDS.pack(0, 0, 0)))
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(4096):
                pass

    thread = threading.Thread(target=noded, daemon=True)
    thread.start()
    stream = NodeStream({"node": "n1", "ranks": [0], "streamAddress": f"127.0.0.1:{port}"}, 10)
    stream.start("cred", {"jobId": 1, "stepId": 0})
    stream.send(ss.STDIN, b"typed\n")
    kind, _ = stream.await_started()
    assert kind == ss.STARTED
    stream.sock.setblocking(True)
    got: list[tuple[int, bytes]] = []
    while stream.receive():
        got += [(k, bytes(p)) for k, p in stream.frames()]
    got += [(k, bytes(p)) for k, p in stream.frames()]
    stream.close()
    thread.join(10)
    listener.close()
    assert seen["stdin"] == b"typed\n"
    assert got[0] == (ss.STDOUT, ss.RANK.pack(0) + b"real\n")
    assert got[1][0] == ss.REFUSED and b"tampered with" in got[1][1]
    assert len(got) == 2  # nothing after the injected frame, not even the real EXIT


def test_an_older_noded_is_named() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def old_noded() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(ss.frame(ss.HELLO, b"corral-steps/1\n" + os.urandom(32)))

    thread = threading.Thread(target=old_noded, daemon=True)
    thread.start()
    from corral.errors import CorralError

    with pytest.raises(CorralError, match="speaks corral-steps/1, this srun corral-steps/2"):
        NodeStream({"node": "n1", "streamAddress": f"127.0.0.1:{port}"}, 10)
    thread.join(10)
    listener.close()
