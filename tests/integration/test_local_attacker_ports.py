"""A local user against ctld's and noded's ports, on real daemons (docs/security.md,
"The local attacker": requests before the caller is known, ctld's socket, noded's
task-stream port).

- Unauthenticated bodies flooding the HTTP gateway take no node down, touch no running
  job and leave squeue answering; idle unauthenticated connections are bounded per peer.
- ctld refuses a socket directory another user made; the socket `corral up` (the
  LocalCluster) makes cannot be pre-made or taken by another user; the commands refuse a
  socket another user serves, before they send anything.
- noded's task stream refuses an oversized first frame at once, admits a bounded number
  of unproven connections, and its memory does not follow what they send.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import pwd
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest

from corral import stepstream as ss
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.realusers import Users, can_make_users, command

UP_STATES = ("NODE_STATE_IDLE", "NODE_STATE_MIXED", "NODE_STATE_ALLOCATED")
FLOOD_BODY_BYTES = 8 * 1024 * 1024 - 64  # just under the gateway's 8 MiB body limit


# ---------------------------------------------------------------- the HTTP gateway


def expensive_body() -> bytes:
    """8 MB of JSON that costs seconds of CPU to turn into a message (two million ids)."""
    head, tail = b'{"filter":{"jobIds":[', b"]}}"
    n = (FLOOD_BODY_BYTES - len(head) - len(tail)) // 4
    return head + b",".join([b'"1"'] * n) + tail


def post_unauthenticated(address: tuple[str, int], body: bytes) -> str:
    """One request with no credential: the status line's code, or how it ended."""
    head = (
        "POST /corral.v1.Controller/GetJobs HTTP/1.1\r\nHost: ctld\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(address, timeout=120) as s:
        with contextlib.suppress(OSError):  # refused before the body was read
            s.sendall(head + body)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError as exc:
            if not data:
                return f"reset ({exc})"
    return data.split(b" ", 2)[1].decode() if data else "closed"


class Watch:
    """Polls the cluster over ctld's socket while something else runs: every node
    state seen, every late (not responding) node, how long each answer took."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.states: set[str] = set()
        self.late: set[str] = set()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                nodes = self.c.client().get_nodes({}).get("nodes", [])
                self.c.client().get_jobs({})
            except Exception as exc:  # recorded, asserted on below
                self.errors.append(str(exc))
                continue
            self.latencies.append(time.monotonic() - t0)
            for n in nodes:
                self.states.add(str(n.get("state")))
                if n.get("notResponding"):
                    self.late.add(str(n["name"]))
            self._stop.wait(0.2)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(150)


@pytest.mark.timeout(420)
def test_an_unauthenticated_flood_takes_no_node_down(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    """Sixteen 8 MB bodies without a credential, eight at a time: each is refused
    before it is read or parsed, heartbeats keep arriving, the running job is
    untouched (not requeued, not fenced) and squeue keeps answering."""
    c = cluster_factory(nodes=2, gpus_per_node=0)
    job_id = c.submit("#!/bin/sh\nsleep 600\n", workDir=str(tmp_path))
    before = c.wait_state(job_id, "RUNNING")
    host = c.node_names.index(before["batchHost"])
    wait_for(lambda: c.node_job_pids(host), 30, "the job's processes")
    body = expensive_body()
    host_port = c.http_address.rpartition(":")
    address = (host_port[0], int(host_port[2]))
    with Watch(c) as watch, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post_unauthenticated(address, body), range(16)))
    assert not [a for a in answers if a.startswith("2")], answers  # none was served
    assert "401" in answers, answers
    assert watch.latencies and not watch.errors, watch.errors[:3]
    assert watch.states <= set(UP_STATES) and not watch.late, (watch.states, watch.late)
    # generous: the answers take milliseconds; before, squeue stalled ~20 s
    assert max(watch.latencies) < 5.0, sorted(watch.latencies)[-5:]
    after = c.job(job_id)
    assert after["state"] == "JOB_STATE_RUNNING"
    assert after.get("restartCount", 0) == before.get("restartCount", 0)
    assert after["batchHost"] == before["batchHost"]
    assert c.node_job_pids(host), "the job's processes were killed (fenced)"
    c.client().cancel_jobs({"filter": {"jobIds": [job_id]}})


def open_idle(address: tuple[str, int], n: int) -> list[socket.socket]:
    return [socket.create_connection(address, timeout=10) for _ in range(n)]


def peer_answer(sock: socket.socket, wait_s: float) -> bytes | None:
    """What the other end said before closing ``sock`` within ``wait_s`` (b"": closed
    or reset without a word), None while it keeps it open."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while chunk := sock.recv(65536):  # an answer to nothing asked: refused
            data += chunk
    except TimeoutError:
        return data or None
    except OSError:
        pass
    return data


def closed_by_peer(sock: socket.socket, wait_s: float) -> bool:
    return peer_answer(sock, wait_s) is not None


@pytest.mark.timeout(180)
def test_unproven_gateway_connections_are_bounded_per_peer(
    cluster_factory: ClusterFactory,
) -> None:
    """Idle TCP connections that never authenticate: only a few per peer are kept
    (all of 127/8 is one peer: a local user can bind any of it), those only until
    a deadline, and the socket's users never notice."""
    c = cluster_factory(nodes=1, gpus_per_node=0)
    host, _, port = c.http_address.rpartition(":")
    conns = open_idle((host, int(port)), 120)
    try:
        answers = [peer_answer(s, 0.2) for s in conns]
        kept = [s for s, said in zip(conns, answers, strict=True) if said is None]
        assert len(kept) <= 64, f"{len(kept)} of 120 idle unauthenticated connections kept"
        said = next(a for a in answers if a)  # the ones turned away are told why
        assert b" 503 " in said and b"too many unproven connections" in said, said
        assert c.client().get_nodes({})["nodes"]  # the socket still answers
        # another loopback address is the same peer
        with socket.create_connection(
            (host, int(port)), timeout=10, source_address=("127.9.9.9", 0)
        ) as other:
            assert closed_by_peer(other, 2.0)
        # the ones kept are dropped at the deadline
        deadline = time.monotonic() + 60
        for s in kept:
            assert closed_by_peer(s, max(0.1, deadline - time.monotonic())), "kept past it"
    finally:
        for s in conns:
            s.close()
    # the slots are free again
    fresh = socket.create_connection((host, int(port)), timeout=10)
    assert not closed_by_peer(fresh, 0.5)
    fresh.close()


# ---------------------------------------------------------------- ctld's socket


class FakeController:
    """A process of ``pw`` serving an HTTP "controller" on a Unix socket at ``path``,
    answering every request "Submitted batch job 4242" and keeping what it received
    in ``log``. ``take``: remove whatever is at ``path`` first (ctld's socket)."""

    def __init__(self, pw: pwd.struct_passwd, path: str, log: pathlib.Path, take: bool) -> None:
        self.log = log
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: become the user, listen, serve until killed
            code = 0
            try:
                os.close(ready_r)
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
                self._serve(path, take, ready_w)
            except BaseException as exc:  # told to the parent
                with contextlib.suppress(OSError):
                    os.write(ready_w, f"error: {type(exc).__name__}: {exc}".encode())
                code = 3
            finally:
                os._exit(code)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as fh:
            self.status = fh.read(4096).decode()

    def _serve(self, path: str, take: bool, ready_w: int) -> None:
        if take:
            os.unlink(path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o666)
        srv.listen(16)
        os.write(ready_w, b"ok")
        os.close(ready_w)
        while True:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(5)
                data = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                        data += chunk
                    head, _, rest = data.partition(b"\r\n\r\n")
                    size = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    while len(rest) < size and (chunk := conn.recv(65536)):
                        rest += chunk
                    data = head + b"\r\n\r\n" + rest if data else b""
                if data:
                    with open(self.log, "ab") as fh:
                        fh.write(data)
                reply = b'{"jobId":"4242","cluster":"corral"}'
                with contextlib.suppress(OSError):
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(reply)}\r\n\r\n".encode()
                        + reply
                    )

    def heard(self) -> bytes:
        try:
            return self.log.read_bytes()
        except FileNotFoundError:
            return b""

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


@contextlib.contextmanager
def fake_controller(
    users: Users, pw: pwd.struct_passwd, path: str, *, take: bool = False
) -> Iterator[FakeController]:
    fake = FakeController(pw, path, users.home(pw) / f"heard-{os.getpid()}-{time.time_ns()}", take)
    try:
        yield fake
    finally:
        fake.stop()


@contextlib.contextmanager
def dir_of(pw: pwd.struct_passwd, path: str) -> Iterator[str]:
    """``path``, made by user ``pw`` (mode 0755), removed afterwards."""
    os.mkdir(path, 0o755)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sbatch_as(
    c: LocalCluster, users: Users, pw: pwd.struct_passwd, **env: str
) -> tuple[int, str, str]:
    secret = "--export=ALL,API_KEY=hunter2"
    return command(
        c, pw, "sbatch", "--parsable", secret, "--wrap", "echo private", cwd=users.home(pw), env=env
    )


needs_users = pytest.mark.skipif(not can_make_users(), reason="needs root and useradd")


@needs_users
@pytest.mark.timeout(120)
def test_ctld_refuses_a_socket_directory_another_user_made(
    users: Users, cluster_factory: ClusterFactory
) -> None:
    with dir_of(users.bob, tempfile.mktemp(prefix="corral-premade-", dir="/tmp")) as premade:
        with pytest.raises(RuntimeError) as failed:
            cluster_factory(nodes=1, gpus_per_node=0, socket_path=f"{premade}/ctld.sock")
        said = str(failed.value)
        assert "ctld: error:" in said and premade in said, said
        assert users.bob.pw_name in said, said  # whose it is
        assert not os.path.exists(f"{premade}/ctld.sock")  # nothing bound there


@needs_users
@pytest.mark.timeout(180)
def test_corral_ups_socket_cannot_be_premade_or_taken_by_another_user(
    users: Users, cluster_factory: ClusterFactory
) -> None:
    """bob makes the directory `corral up` used to pick (a name derived from the state
    dir) before the cluster starts, and tries to put his own controller in place of
    ctld's socket once it runs: alice's sbatch still reaches ctld, and bob hears nothing."""
    premade: list[str] = []

    def before_start(c: Any) -> None:
        tag = hashlib.sha1(str(c.state_dir).encode()).hexdigest()[:12]
        path = f"/tmp/corral-{tag}"
        os.mkdir(path, 0o755)
        os.chown(path, users.bob.pw_uid, users.bob.pw_gid)
        premade.append(path)

    try:
        c = cluster_factory(before_start, nodes=1, gpus_per_node=0)
        where = os.path.dirname(c.socket)
        st = os.stat(where)
        assert where not in premade
        assert st.st_uid == os.geteuid() and not st.st_mode & 0o022, (where, oct(st.st_mode))
        with fake_controller(users, users.bob, c.socket, take=True) as fake:
            code, out, err = sbatch_as(c, users, users.alice)
            assert code == 0, err
            job = c.job(out.strip().split(";")[0])
            assert job["user"] == users.alice.pw_name
            assert fake.heard() == b""
            assert fake.status.startswith("error"), fake.status  # bob could not take it
    finally:
        for path in premade:
            shutil.rmtree(path, ignore_errors=True)


@needs_users
@pytest.mark.timeout(120)
def test_commands_refuse_a_socket_another_user_serves(
    users: Users, cluster_factory: ClusterFactory
) -> None:
    """CORRAL_CTLD_SOCKET points at bob's controller (a stale env.sh, a path bob got to
    first): alice's sbatch asks the kernel who serves it and sends nothing to bob."""
    c = cluster_factory(nodes=1, gpus_per_node=0)
    with (
        dir_of(users.bob, tempfile.mktemp(prefix="corral-bobs-", dir="/tmp")) as bobs,
        fake_controller(users, users.bob, f"{bobs}/ctld.sock") as fake,
    ):
        assert fake.status == "ok", fake.status
        code, out, err = sbatch_as(c, users, users.alice, CORRAL_CTLD_SOCKET=f"{bobs}/ctld.sock")
        assert code != 0 and "4242" not in out, (out, err)
        assert users.bob.pw_name in err and "ctld.sock" in err, err
        assert fake.heard() == b""  # not the script, not the environment, not the secret
        # the real one is still trusted: root serves it
        code, out, err = sbatch_as(c, users, users.alice)
        assert code == 0, err


# ---------------------------------------------------------------- noded's task stream


@pytest.fixture(scope="module")
def stream(
    module_cluster_factory: ClusterFactory,
) -> Iterator[tuple[LocalCluster, tuple[str, int]]]:
    """One node and its task-stream address (from a step of a running job)."""
    c = module_cluster_factory(nodes=1, gpus_per_node=0)
    api = c.client()
    spec = {"name": "holder", "script": "#!/bin/sh\nsleep 600\n", "workDir": "/tmp"}
    job_id = api.submit_job({"spec": spec})["jobId"]
    c.wait_state(job_id, "RUNNING")
    reply = api.create_step({"spec": {"jobId": job_id, "argv": ["true"]}})
    host, port, _ = ss.split_address(reply["step"]["nodes"][0]["streamAddress"])
    yield c, (host, port)
    api.cancel_jobs({"filter": {"jobIds": [job_id]}})


def first_frame(sock: socket.socket, timeout: float) -> tuple[int, bytes] | None:
    """noded's first frame on a new connection (None: closed without one)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < ss.HEADER.size or len(data) < 4 + ss.HEADER.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    length, kind = ss.HEADER.unpack_from(data)
    return kind, data[ss.HEADER.size : 4 + length]


@pytest.mark.timeout(60)
def test_an_oversized_first_frame_is_refused_at_once(
    stream: tuple[LocalCluster, tuple[str, int]],
) -> None:
    _, address = stream
    sock = socket.create_connection(address, timeout=10)
    try:
        assert first_frame(sock, 10) is not None
        # 4 MiB declared (far over what a START needs, under the old 16 MiB): the
        # header alone is enough to refuse it
        sock.sendall(ss.HEADER.pack(4 * 1024 * 1024, ss.START) + b"x" * 65536)
        t0 = time.monotonic()
        answer = first_frame(sock, 3.0)
        assert answer is not None and answer[0] == ss.REFUSED, answer
        assert b"limit" in answer[1], answer
        assert time.monotonic() - t0 < 3.0
    finally:
        sock.close()


@pytest.mark.timeout(90)
def test_unproven_stream_connections_are_bounded(
    stream: tuple[LocalCluster, tuple[str, int]],
) -> None:
    _, address = stream
    conns = [socket.create_connection(address, timeout=10) for _ in range(200)]
    try:
        frames = [first_frame(s, 5.0) for s in conns]
        hello = [f for f in frames if f is not None and f[0] == ss.HELLO]
        refused = [f for f in frames if f is not None and f[0] == ss.REFUSED]
        assert len(hello) <= 64, f"{len(hello)} of 200 unproven connections admitted"
        assert refused and all(b"unproven" in f[1] for f in refused), refused[:1]
    finally:
        for s in conns:
            s.close()

    # closing them frees their places: a new connection is admitted again
    def admitted() -> bool:
        with socket.create_connection(address, timeout=10) as s:
            frame = first_frame(s, 5.0)
            return frame is not None and frame[0] == ss.HELLO

    wait_for(admitted, 20, "a new connection to be admitted")


def noded_rss(c: LocalCluster) -> int:
    return int(psutil.Process(c.procs[c.node_names[0]].pid).memory_info().rss)


def send_all_but_the_last_byte(address: tuple[str, int], frame: bytes) -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    with contextlib.suppress(OSError):  # refused (closed) or not read (kept waiting)
        sock.sendall(frame[:-1])
    return sock


@pytest.mark.timeout(180)
def test_unproven_first_frames_do_not_grow_noded(
    stream: tuple[LocalCluster, tuple[str, int]],
) -> None:
    """200 connections each send a 2 MiB first frame, all but its last byte, and hold:
    noded's memory does not follow (before: all of it was buffered, ~400 MiB)."""
    c, address = stream
    idle = noded_rss(c)
    frame = ss.HEADER.pack(2 * 1024 * 1024 - 1, ss.START) + b"{" * (2 * 1024 * 1024 - 2)
    with ThreadPoolExecutor(200) as pool:
        conns = list(pool.map(lambda _: send_all_but_the_last_byte(address, frame), range(200)))
    try:
        grown = (noded_rss(c) - idle) / (1 << 20)
        assert grown < 100, f"noded grew by {grown:.0f} MiB"
    finally:
        for s in conns:
            s.close()
    assert psutil.Process(c.procs[c.node_names[0]].pid).is_running()
