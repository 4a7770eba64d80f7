"""ctld on a PostgreSQL that stops under load: changes are refused with a clear error,
queries keep answering from memory, nothing half-written, and all recovers by itself."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pytest

from corral.errors import CorralError
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.postgres import TempPostgres
from tests.conftest import Commands, wait_for


def metrics(c: LocalCluster) -> str:
    return c.scrape()


@pytest.fixture
def pg() -> Iterator[TempPostgres]:
    server = TempPostgres.start()
    if server is None:
        pytest.skip("no PostgreSQL binaries on this machine")
    try:
        yield server
    finally:
        server.remove()


def test_postgres_outage_under_load(
    tmp_path: pathlib.Path, pg: TempPostgres, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0, store_url=pg.url)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    # a job that ends while the database is away: its end is written when it returns
    ender = cmd(
        "sbatch",
        "--parsable",
        "-o",
        "e.out",
        "--wrap",
        "touch go; while [ ! -e end ]; do sleep 0.05; done; echo done",
    ).stdout.strip()
    wait_for(lambda: (work / "go").exists(), 30, "the job to start")

    acked: list[str] = []
    refused: list[str] = []
    stop = threading.Event()
    spec = {"script": "#!/bin/sh\ntrue\n", "workDir": str(work), "name": "load", "hold": True}

    def load() -> None:
        client = c.client()
        while not stop.is_set():
            try:
                acked.append(client.call("SubmitJob", {"spec": spec})["jobId"])
            except CorralError as exc:
                refused.append(exc.message)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 30, 30, "submissions before the outage")
        pg.stop()
        wait_for(lambda: len(refused) >= 10, 30, "submissions refused during the outage")
        out = cmd("sbatch", "--wrap", "true", check=False)
        assert out.returncode == 1
        assert "the store is unavailable" in out.stderr, out.stderr
        assert "changes are refused until it is back" in out.stderr
        assert cmd("scancel", ender, check=False).returncode == 1
        assert "corral_store_up 0.0" in metrics(c)
        # queries answer from memory
        assert ender in cmd("squeue", "-h", "-o", "%i").stdout.split()
        assert cmd("scontrol", "show", "job", ender).returncode == 0
        (work / "end").touch()
        wait_for(lambda: (work / "e.out").read_text() == "done\n", 30, "the job to end meanwhile")
        wait_for(lambda: cmd.job(ender)["state"] == "JOB_STATE_COMPLETED", 30, "ctld to hear of it")
        pg.start_again()
        during = len(acked)
        wait_for(lambda: len(acked) >= during + 30, 60, "submissions after the store returns")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert all("the store is unavailable" in m for m in refused), set(refused)
    text = metrics(c)
    assert "corral_store_up 1.0" in text and "corral_store_outages_total 1.0" in text
    # every acknowledged job is in the store exactly once, nothing else was written
    ids = [
        line.split("|")[0]
        for line in cmd(
            "sacct", "-X", "-n", "-P", "-o", "JobID", "-S", "2000-01-01", "-a"
        ).stdout.split()
    ]
    assert len(ids) == len(set(ids))
    assert set(acked) <= set(ids)
    assert set(ids) - set(acked) == {ender}
    # the end that happened while the store was away was written when it came back
    state = cmd("sacct", "-X", "-n", "-P", "-o", "State", "-j", ender).stdout.strip()
    assert state == "COMPLETED"
