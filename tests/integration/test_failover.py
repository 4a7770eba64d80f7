"""Controller failover on a real PostgreSQL: a standby takes the lease when the primary
dies, a deposed primary cannot write, and the old primary comes back as a standby.

Real processes throughout: two ctlds (one per port set, as two hosts would be), two
nodeds, the commands; the primary is killed with SIGKILL (or frozen with SIGSTOP)."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import pathlib
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from corral.api import GrpcController
from corral.errors import ControllerUnavailable, CorralError, NotPrimary
from corral.rest import _parse_response
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.postgres import TempPostgres
from corral.wire import corral_pb2 as pb
from ctld.storage.lease import Lease
from ctld.storage.store import Store, insert_job, jobs, normalize_url
from tests.conftest import Commands, pg_admin_url, pg_schema, wait_for

LEASE_S = 3.0


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL store: a schema of CORRAL_TEST_PG_URL's server (CI: required),
    else a private server of this machine's PostgreSQL binaries."""
    admin = pg_admin_url()  # with CI=true and no server this fails the test
    if admin:
        with pg_schema(admin) as url:
            yield url
        return
    server = TempPostgres.start()
    if server is None:
        pytest.skip("no PostgreSQL: set CORRAL_TEST_PG_URL (.ci/run does) or install it")
    try:
        yield server.url
    finally:
        server.remove()


def _job(job_id: int) -> pb.Job:
    j = pb.Job(job_id=job_id, user="u", state=pb.JOB_STATE_PENDING)
    j.events.add(event="submitted", to_state=pb.JOB_STATE_PENDING, cause="test")
    return j


def _stored_ids(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        return sorted(int(i) for (i,) in conn.execute(sa.select(jobs.c.job_id)))


async def test_a_deposed_primary_cannot_commit(pg_url: str) -> None:
    """The fencing token: once another controller has taken the lease, the old one's
    commit fails with NotPrimary, writes nothing, and the store stays fenced off."""
    url = normalize_url(pg_url)
    old = Lease(Store.make_engine(url, "FULL"), "old", lease_s=0.5)
    new = Lease(Store.make_engine(url, "FULL"), "new", lease_s=30.0)
    old_store = Store(pg_url, fence=old.check)
    new_store = Store(pg_url, fence=new.check)
    old_store.open()
    try:
        old.ensure()
        assert old.try_acquire()
        assert not new.try_acquire()  # held: a standby waits
        assert new.last.holder == "old" and new.last.live
        await old_store.commit(insert_job(_job(1)))

        # the old primary stops renewing (it hangs); once the lease expired it is taken
        wait_for(new.try_acquire, 10, "the standby to take the expired lease")
        assert new.token == old.token + 1
        lost: list[str] = []
        old.on_lost = lost.append

        with pytest.raises(NotPrimary, match="lost the lease"):
            await old_store.commit(insert_job(_job(2)))
        assert old_store.deposed and lost  # it knows: ctld steps down on this
        with pytest.raises(NotPrimary):  # and every later change is refused up front
            old_store.check_writable()
        with pytest.raises(NotPrimary):
            await old_store.commit(insert_job(_job(3)))
        assert not await asyncio.to_thread(old.renew)

        new_store.open()
        assert _stored_ids(new_store) == [1]  # nothing of the deposed commits
        await new_store.commit(insert_job(_job(2)))
        assert _stored_ids(new_store) == [1, 2]
    finally:
        old_store.close()
        new_store.close()
        old.engine.dispose()
        new.engine.dispose()


def test_a_takeover_waits_for_a_commit_in_flight(pg_url: str) -> None:
    """The check and the commit are one: a take that comes while a fenced transaction
    is open waits for it; the transaction after the take is refused."""
    url = normalize_url(pg_url)
    old = Lease(Store.make_engine(url, "FULL"), "old", lease_s=0.3)
    new = Lease(Store.make_engine(url, "FULL"), "new", lease_s=30.0)
    try:
        old.ensure()
        assert old.try_acquire()
        wait_for(lambda: not old.read().live, 10, "the old lease to expire")
        taken: list[bool] = []
        with old.engine.connect() as conn:
            txn = conn.begin()
            old.check(conn)  # passes: nobody took the lease yet
            th = threading.Thread(target=lambda: taken.append(new.try_acquire()))
            th.start()

            def take_waits() -> bool:
                with new.engine.connect() as probe:
                    q = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    return bool(probe.execute(sa.text(q)).scalar())

            wait_for(take_waits, 10, "the take to wait for the open transaction")
            assert not taken
            txn.commit()
        th.join(10)
        assert taken == [True]
        with old.engine.connect() as conn, conn.begin(), pytest.raises(NotPrimary):
            old.check(conn)
    finally:
        old.engine.dispose()
        new.engine.dispose()


def test_sqlite_refuses_a_standby(tmp_path: pathlib.Path) -> None:
    """Failover is not offered on SQLite: ctld says so at start-up and does not start."""
    c = LocalCluster(tmp_path / "c", nodes=1, gpus_per_node=0, controllers=2)
    c.write_config()
    with pytest.raises(RuntimeError, match="failover needs the store on PostgreSQL"):
        c.start_ctld(index=0)


# ---------------------------------------------------------------- real processes


def ping(cmd: Commands) -> list[tuple[str, str, str]]:
    """scontrol ping as (label, name, UP/DOWN) per controller."""
    out = cmd("scontrol", "ping", check=False).stdout
    rows = []
    for line in out.splitlines():
        # Slurmctld(primary) at 127.0.0.1:1234 is UP
        head, _, rest = line.partition(") at ")
        name, _, state = rest.rpartition(" is ")
        rows.append((head.removeprefix("Slurmctld("), name, state))
    return rows


def names(c: LocalCluster) -> list[str]:
    return [f"127.0.0.1:{c.controller_ports(i)[0]}" for i in range(c.controllers)]


@pytest.fixture
def ha_cluster(pg_url: str, cluster_factory: ClusterFactory) -> LocalCluster:
    # the factory comes after pg_url: it stops the cluster before the store's schema goes
    return cluster_factory(
        nodes=2,
        gpus_per_node=0,
        controllers=2,
        lease_s=LEASE_S,
        store_url=pg_url,
        heartbeat_interval_s=1.0,
        heartbeat_timeout_s=12.0,
    )


class Burst:
    """Threads submitting held jobs as fast as the controllers take them; a job counts
    only once its submit was acknowledged."""

    def __init__(self, c: LocalCluster, work: pathlib.Path, threads: int = 2) -> None:
        self.c = c
        self.work = work
        self.acked: list[tuple[int, str]] = []
        self.errors: list[CorralError] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in range(threads)]

    def _run(self, t: int) -> None:
        client = self.c.client()
        n = 0
        while not self.stop.is_set():
            name = f"burst-{t}-{n}"
            n += 1
            spec = {"script": "#!/bin/sh\ntrue\n", "workDir": str(self.work), "name": name}
            try:
                reply = client.submit_job({"spec": {**spec, "hold": True}})
            except CorralError as exc:
                with self.lock:
                    self.errors.append(exc)
                continue
            with self.lock:
                self.acked.append((int(reply["jobId"]), name))

    def __enter__(self) -> Burst:
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(60)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def test_standby_takes_over_from_a_killed_primary(
    ha_cluster: LocalCluster, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ha_cluster
    monkeypatch.setenv("CORRAL_CTLD_GRPC", c.grpc_addresses)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    first, second = names(c)
    wait_for(
        lambda: ping(cmd) == [("primary", first, "UP"), ("backup", second, "UP")],
        20,
        "the first controller to be primary, the second a backup",
    )

    # jobs that run across the failover: two end after it, one during it (no primary)
    wait = "while [ ! -e {f} ]; do sleep 0.05; done"
    running = {
        "ok": cmd("sbatch", "--parsable", "--wrap", f"{wait.format(f='release')}; echo ok"),
        "fails": cmd("sbatch", "--parsable", "--wrap", f"{wait.format(f='release')}; exit 3"),
        "gap": cmd("sbatch", "--parsable", "--wrap", f"{wait.format(f='release-gap')}; exit 0"),
    }
    ids = {k: v.stdout.strip() for k, v in running.items()}
    for job_id in ids.values():
        c.wait_state(job_id, "RUNNING", timeout=30)

    with Burst(c, work) as burst:
        wait_for(lambda: burst.count() >= 20, 30, "acknowledged submits before the kill")
        c.kill_process("ctld")  # SIGKILL: the primary dies mid-burst
        killed = time.monotonic()
        (work / "release-gap").touch()  # a job ends while no controller is primary

        def second_is_primary() -> bool:
            try:
                c.client(1).get_cluster_info({})
            except ControllerUnavailable:
                return False
            return True

        wait_for(second_is_primary, LEASE_S * 4 + 10, "the standby to take over", interval=0.02)
        takeover_s = time.monotonic() - killed
        at_takeover = burst.count()
        wait_for(lambda: burst.count() >= at_takeover + 20, 30, "submits on the new primary")
    print(f"takeover {takeover_s:.2f} s after SIGKILL (lease {LEASE_S} s)")
    # the lease runs out at most LEASE_S after the kill; the standby looks every LEASE_S/5
    assert takeover_s <= LEASE_S + LEASE_S / 5 + 2.0, f"takeover took {takeover_s:.2f} s"

    # every acknowledged job is there, once; nothing else failed but the lost requests
    assert all(isinstance(e, ControllerUnavailable) for e in burst.errors), burst.errors
    # per thread: the request in flight at the kill, and one that connected to the dying
    # process's socket before the kernel closed it (the client cannot know it was not
    # done, so it does not resend it)
    assert len(burst.errors) <= 2 * len(burst.threads), burst.errors
    stored = c.client().get_jobs({}).get("jobs", [])
    by_name: dict[str, list[int]] = {}
    for job in stored:
        by_name.setdefault(job["spec"].get("name", ""), []).append(int(job["jobId"]))
    for job_id, name in burst.acked:
        assert by_name.get(name) == [job_id], (
            f"{name}: acknowledged as {job_id}, stored {by_name.get(name)}"
        )
    assert len({i for i, _ in burst.acked}) == len(burst.acked)

    # srun (its controller calls over the commands' list) and a gRPC client with the
    # list of gRPC addresses find the new primary too
    assert cmd("srun", "-N1", "echo", "hi").stdout.strip() == "hi"
    grpc_api = GrpcController(token=c.token(getpass.getuser()))
    try:
        assert grpc_api.targets == c.grpc_addresses.split(",")
        assert grpc_api.get_cluster_info({})["cluster"] == "corral"
        assert grpc_api.target == c.grpc_addresses.split(",")[1]  # asked first from now on
    finally:
        grpc_api.close()

    # the jobs that ran through the failover end as they should, on the new primary
    (work / "release").touch()
    assert int(c.wait_state(ids["ok"], "COMPLETED", timeout=30).get("exitCode", 0)) == 0
    failed = c.wait_state(ids["fails"], "FAILED", timeout=30)
    assert int(failed.get("exitCode", 0)) == 3
    c.wait_state(ids["gap"], "COMPLETED", timeout=30)
    sacct = cmd(
        "sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(ids.values())
    )
    assert sorted(sacct.stdout.split()) == sorted(
        [f"{ids['ok']}|COMPLETED|0:0", f"{ids['fails']}|FAILED|3:0", f"{ids['gap']}|COMPLETED|0:0"]
    )

    # the old primary, restarted, stays a standby: the lease is held and renewed
    c.start_ctld(index=0)
    assert ping(cmd) == [("backup", first, "UP"), ("primary", second, "UP")]
    with pytest.raises(NotPrimary, match="standby"):
        c.client(0).get_cluster_info({})
    status = cmd("corral", "status").stdout
    assert re.search(rf"^{first}\s+backup\s+UP\s", status, re.M), status
    assert re.search(rf"^{second}\s+primary\s+UP\s+cluster corral", status, re.M), status
    deadline = time.monotonic() + 2 * LEASE_S  # two whole leases: it never takes over
    while time.monotonic() < deadline:
        assert ping(cmd) == [("backup", first, "UP"), ("primary", second, "UP")]


def test_a_frozen_primary_wakes_up_deposed(
    ha_cluster: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """SIGSTOP the primary past its lease: the standby takes over; woken, the old
    primary's writes are fenced off and it steps down to standby. A submit it was sent
    while frozen is never acknowledged without being stored."""
    c = ha_cluster
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    first, second = names(c)
    wait_for(lambda: ping(cmd)[0] == ("primary", first, "UP"), 20, "the first to be primary")
    pid = c.procs["ctld"].pid
    path = c.local_socket(0)
    spec = {"script": "#!/bin/sh\ntrue\n", "workDir": str(work), "name": "asked-frozen"}
    body = json.dumps({"spec": {**spec, "hold": True}}).encode()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _answers(c, 1), LEASE_S * 4 + 10, "the standby to take over")
        # a submit sent to the frozen primary: it waits in the socket's buffers
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(path)
        sock.sendall(
            b"POST /corral.v1.Controller/SubmitJob HTTP/1.1\r\nHost: ctld\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    with sock:
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    wait_for(
        lambda: ping(cmd) == [("backup", first, "UP"), ("primary", second, "UP")],
        LEASE_S * 4 + 10,
        "the woken primary to step down",
    )
    found = [
        int(j["jobId"])
        for j in c.client().get_jobs({}).get("jobs", [])
        if j["spec"].get("name") == "asked-frozen"
    ]
    try:
        reply = _parse_response(b"".join(chunks))
    except ControllerUnavailable as exc:  # NotPrimary, or closed as it stepped down
        assert found == [], f"refused ({exc}) yet stored as {found}"
    else:  # acknowledged: then it was stored before the lease was lost
        assert found == [int(reply["jobId"])]
    assert "stepping down to standby" in (c.state_dir / "log" / "ctld.log").read_text()
    # and the new primary goes on taking work
    job_id = cmd("sbatch", "--parsable", "--wrap", "true").stdout.strip()
    c.wait_state(job_id, "COMPLETED", timeout=30)


def _answers(c: LocalCluster, index: int) -> bool:
    try:
        c.client(index).get_cluster_info({})
    except ControllerUnavailable:
        return False
    return True
