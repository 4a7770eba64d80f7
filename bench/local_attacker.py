"""A local user against ctld's and noded's ports (issue 22): what the cluster feels.

    .venv/bin/python -m bench.local_attacker [--quick] [--connections N]

ctld: a 2-node cluster with a job running. First idle, then during a flood of sixteen
8 MB JSON bodies (two million job ids each: ~3 s of CPU to parse) sent eight at a time
to the HTTP gateway with no credential, then the same bodies with a valid token (they
are parsed, off the event loop, and refused for their size). Meanwhile ``squeue`` runs
in a loop and GetNodes is polled every 0.2 s over ctld's socket: squeue's wall time,
the longest gap between two heartbeats ctld recorded from a node (its interval is
2 s, DOWN after 10 s), nodes seen late or DOWN, whether the job was requeued or its
processes killed, ctld's CPU during the flood and how the requests were answered.

noded: a 1-node cluster, its RSS idle; then ``--connections`` (2,000) unproven
task-stream connections sending nothing, then as many each sending a first frame of
2 MiB (all but its last byte) and holding: what noded admitted, refused, its RSS at
the peak and 5 s after they close; and how long an oversized first frame (4 MiB
declared) takes to be refused.

Benchmarks print tables; nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import resource
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from bench.common import (
    VENV_BIN,
    PhaseResult,
    Table,
    bench_cluster,
    log,
    ms,
    run_cmd,
    save_result,
    summary,
)
from corral import stepstream as ss

BODY_BYTES = 8 * 1024 * 1024 - 64
START_BYTES = 2 * 1024 * 1024 - 1  # corral.stepstream.MAX_START (the bench runs on older code too)
UP = ("NODE_STATE_IDLE", "NODE_STATE_MIXED", "NODE_STATE_ALLOCATED")


def flood_body() -> bytes:
    head, tail = b'{"filter":{"jobIds":[', b"]}}"
    return head + b",".join([b'"1"'] * ((BODY_BYTES - len(head) - len(tail)) // 4)) + tail


def post(address: tuple[str, int], body: bytes, token: str = "") -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        "POST /corral.v1.Controller/GetJobs HTTP/1.1\r\nHost: ctld\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{auth}"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(address, timeout=300) as s:
        with contextlib.suppress(OSError):
            s.sendall(head + body)
        data = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                data += chunk
    return data.split(b" ", 2)[1].decode() if data else "closed"


class Observer:
    """squeue in a loop and GetNodes every 0.2 s, in threads, while a flood runs."""

    def __init__(self, cluster: Any) -> None:
        self.c = cluster
        self.squeue: list[float] = []
        self.errors: list[str] = []
        self.states: set[str] = set()
        self.late: set[str] = set()
        self.beats: dict[str, list[float]] = {}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._sq, self._nodes)]

    def _sq(self) -> None:
        env, work = self.c.env(), self.c.work_dir
        while not self.stop.is_set():
            dt, proc = run_cmd([str(VENV_BIN / "squeue")], env, work)
            if proc.returncode:
                self.errors.append(proc.stderr.strip()[-200:])
            self.squeue.append(dt)
            self.stop.wait(0.1)

    def _nodes(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                for n in self.c.client().get_nodes({}).get("nodes", []):
                    self.states.add(str(n.get("state")))
                    if n.get("notResponding"):
                        self.late.add(str(n["name"]))
                    seen = self.beats.setdefault(str(n["name"]), [])
                    beat = float(n.get("lastHeartbeat", 0))
                    if not seen or seen[-1] != beat:
                        seen.append(beat)
            self.stop.wait(0.2)

    def max_gap(self) -> float:
        gaps = [b - a for seen in self.beats.values() for a, b in itertools.pairwise(seen)]
        return max(gaps, default=float("nan"))

    def __enter__(self) -> Observer:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def flood_row(
    table: Table, c: Any, label: str, n: int, token: str | None, job: str
) -> dict[str, Any]:
    before = c.job(job)
    ctld = psutil.Process(c.ctld_pid)
    cpu0 = sum(ctld.cpu_times()[:2])
    host, _, port = c.http_address.rpartition(":")
    body = flood_body() if token is not None else b""
    t0 = time.monotonic()
    with Observer(c) as obs:
        if token is None:  # idle: just watch for as long as a short flood lasts
            time.sleep(8)
            answers: list[str] = []
        else:
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda _: post((host, int(port)), body, token), range(n)))
            obs.stop.wait(2)  # what follows the flood
    wall = time.monotonic() - t0
    cpu = sum(ctld.cpu_times()[:2]) - cpu0
    after = c.job(job)
    s = summary(obs.squeue)
    requeued = after.get("restartCount", 0) != before.get("restartCount", 0) or (
        after.get("state") != "JOB_STATE_RUNNING"
    )
    host_index = c.node_names.index(before["batchHost"])
    counts = {a: answers.count(a) for a in sorted(set(answers))}
    table.add(
        label,
        f"{ms(s.get('median'))} / {ms(s.get('p95'))} / {ms(s.get('max'))}",
        f"{obs.max_gap():.1f} s",
        ", ".join(sorted(obs.late)) or "none",
        "yes" if set(obs.states) - set(UP) else "no",
        "yes" if requeued else "no",
        "yes" if not c.node_job_pids(host_index) else "no",
        f"{cpu:.1f} s in {wall:.0f} s",
        ", ".join(f"{k}: {v}" for k, v in counts.items()) or "-",
    )
    return {
        "squeue": s,
        "max_gap": obs.max_gap(),
        "cpu_s": cpu,
        "wall_s": wall,
        "answers": counts,
        "late": sorted(obs.late),
        "errors": obs.errors[:5],
    }


def run_ctld(result: PhaseResult, quick: bool) -> None:
    n = 8 if quick else 16
    table = Table(
        f"ctld: {n} bodies of 8 MB, eight at a time, to the HTTP gateway (2 nodes, a job running)",
        [
            "load",
            "squeue p50 / p95 / max",
            "longest heartbeat gap",
            "nodes late",
            "a node DOWN",
            "job requeued",
            "job killed",
            "ctld CPU",
            "answers",
        ],
    )
    with bench_cluster("attacker-ctld", nodes=2, cpus_per_node=16, gpus_per_node=0) as c:
        job = c.submit("#!/bin/sh\nsleep 3600\n", workDir=str(c.work_dir))
        c.wait_state(job, "RUNNING")
        from corral.testing import wait_for

        wait_for(lambda: c.node_job_pids(c.node_names.index(c.job(job)["batchHost"])), 30, "job")
        log("ctld: idle")
        result.data["idle"] = flood_row(table, c, "idle (8 s)", 0, None, job)
        log("ctld: unauthenticated flood")
        result.data["flood"] = flood_row(table, c, "no credential", n, "", job)
        log("ctld: authenticated flood")
        token = c.token("root")
        result.data["flood_auth"] = flood_row(table, c, "a valid token", n, token, job)
        c.client().cancel_jobs({"filter": {"jobIds": [job]}})
    table.notes += [
        "heartbeats every 2 s, a node late after 3 s and DOWN after 10 s of silence; noded "
        "fences (kills its jobs) after 8 s without an answer",
        "a gap is between two heartbeat times ctld recorded, as GetNodes shows them",
        "answers: the HTTP status of each request (401: no credential; 400: refused by the "
        "limits, two million ids being over 10,000 items, found once the body is parsed)",
    ]
    result.tables.append(table)


def _connect_many(address: tuple[str, int], n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection(address, timeout=10))
        except OSError:
            break
    return out


def _first_frames(conns: list[socket.socket], wait_s: float) -> dict[str, int]:
    """Read each connection's first frame kind (non-blocking, all at once)."""
    kinds = {"hello": 0, "refused": 0, "closed": 0, "nothing": 0}
    pending = {s.fileno(): s for s in conns}
    bufs: dict[int, bytes] = {}
    deadline = time.monotonic() + wait_s
    for s in conns:
        s.setblocking(False)
    poller = select.poll()  # select() stops at descriptor 1024
    for fd in pending:
        poller.register(fd, select.POLLIN)
    while pending and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            if fd not in pending:
                continue
            try:
                chunk = pending[fd].recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                bufs[fd] = bufs.get(fd, b"") + chunk
                if len(bufs[fd]) < ss.HEADER.size:
                    continue
                kind = ss.HEADER.unpack_from(bufs[fd])[1]
                kinds["hello" if kind == ss.HELLO else "refused"] += 1
            else:
                kinds["closed"] += 1
            del pending[fd]
            poller.unregister(fd)
    kinds["nothing"] = len(pending)
    return kinds


def _send_partial(conns: list[socket.socket], frame: bytes, wait_s: float) -> None:
    """Each sends ``frame`` but its last byte, as far as its socket takes it in ``wait_s``."""
    view = memoryview(frame)[:-1]
    sent = {s.fileno(): 0 for s in conns}
    socks = {s.fileno(): s for s in conns}
    deadline = time.monotonic() + wait_s
    poller = select.poll()
    for fd in sent:
        poller.register(fd, select.POLLOUT)
    while sent and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            if fd not in sent:
                continue
            try:
                n = socks[fd].send(view[sent[fd] :])
            except OSError:
                n = -1
            if n < 0 or sent[fd] + n >= len(view):
                del sent[fd]
                poller.unregister(fd)
            else:
                sent[fd] += n


def run_noded(result: PhaseResult, n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 512)), hard))
    table = Table(
        f"noded: {n:,} unproven task-stream connections from one host",
        [
            "what they send",
            "admitted (HELLO)",
            "refused at once",
            "noded RSS idle",
            "peak",
            "5 s after they close",
        ],
    )
    with bench_cluster("attacker-noded", nodes=1, cpus_per_node=16, gpus_per_node=0) as c:
        api = c.client()
        spec = {"name": "holder", "script": "#!/bin/sh\nsleep 3600\n", "workDir": str(c.work_dir)}
        job = api.submit_job({"spec": spec})["jobId"]
        c.wait_state(job, "RUNNING")
        reply = api.create_step({"spec": {"jobId": job, "argv": ["true"]}})
        host, port, _ = ss.split_address(reply["step"]["nodes"][0]["streamAddress"])
        noded = psutil.Process(c.procs[c.node_names[0]].pid)
        frame = ss.HEADER.pack(START_BYTES, ss.START) + b"{" * (START_BYTES - 1)
        for label, payload in (
            ("nothing", b""),
            ("a 2 MiB first frame, all but its last byte", frame),
        ):
            time.sleep(3)
            idle = noded.memory_info().rss
            peak = [idle]
            stop = threading.Event()

            def sample(peak: list[int] = peak, stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    with contextlib.suppress(psutil.Error):
                        peak[0] = max(peak[0], noded.memory_info().rss)
                    stop.wait(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            log(f"noded: {n} connections sending {label}")
            conns = _connect_many((host, port), n)
            kinds = _first_frames(conns, 10)
            if payload:
                _send_partial(conns, payload, 15)
            time.sleep(1)
            for s in conns:
                s.close()
            time.sleep(5)
            after = noded.memory_info().rss
            stop.set()
            sampler.join()
            mib = 1 << 20
            table.add(
                label,
                f"{kinds['hello']:,} of {len(conns):,}",
                f"{kinds['refused'] + kinds['closed']:,}",
                f"{idle / mib:.0f} MiB",
                f"{peak[0] / mib:.0f} MiB (+{(peak[0] - idle) / mib:.0f})",
                f"{after / mib:.0f} MiB (+{(after - idle) / mib:.0f})",
            )
            result.data[f"noded {label}"] = {
                "kinds": kinds,
                "idle": idle,
                "peak": peak[0],
                "after": after,
            }
        with socket.create_connection((host, port), timeout=10) as s:
            _first_frames([s], 5)
            s.setblocking(True)
            s.settimeout(30)
            t0 = time.monotonic()
            s.sendall(ss.HEADER.pack(4 * 1024 * 1024, ss.START) + b"x" * 65536)
            got = b""
            with contextlib.suppress(OSError):
                while len(got) < ss.HEADER.size and (chunk := s.recv(65536)):
                    got += chunk
            took = time.monotonic() - t0
        refused = len(got) >= ss.HEADER.size and ss.HEADER.unpack_from(got)[1] == ss.REFUSED
        table.notes.append(
            f"an oversized first frame (4 MiB declared): {'refused' if refused else 'not refused'}"
            f" after {ms(took)}"
        )
        result.data["oversized_s"] = took
        api.cancel_jobs({"filter": {"jobIds": [job]}})
    result.tables.append(table)


def run(quick: bool, connections: int = 0, skip: str | None = None) -> PhaseResult:
    """The phase (bench/run_all.py's ``attacker``)."""
    n = connections or (500 if quick else 2000)
    result = PhaseResult("local_attacker", config={"connections": n, "quick": quick})
    if skip != "ctld":
        run_ctld(result, quick)
    if skip != "noded":
        run_noded(result, n)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 bodies, 500 connections")
    parser.add_argument("--connections", type=int, default=0, help="task-stream connections")
    parser.add_argument("--skip", choices=("ctld", "noded"), default=None)
    args = parser.parse_args()
    t0 = time.monotonic()
    result = run(args.quick, args.connections, args.skip)
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)} (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
