"""Shared fixtures: a real local cluster (ctld + noded processes) per test that asks."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from corral.testing import LocalCluster

BIN = pathlib.Path(sys.executable).parent


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", nodes=2, gpus_per_node=8, kill_wait_s=2.0)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        print_logs(c)


def print_logs(c: LocalCluster) -> None:
    """The daemons' last lines: pytest shows a test's captured output when it fails."""
    for name in ["ctld", *c.node_names]:
        print(f"----- {name} log -----\n{c.log_tail(name, 60)}")


class Commands:
    """Runs the installed commands against one cluster, from a working directory."""

    def __init__(self, cluster: LocalCluster, cwd: pathlib.Path) -> None:
        self.cluster = cluster
        self.cwd = cwd
        self.env = cluster.env()

    def __call__(
        self,
        *argv: str,
        check: bool = True,
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            input=input,
            text=True,
            capture_output=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr}")
        return proc

    def job(self, job_id: int | str) -> dict[str, Any]:
        jobs = self.cluster.client().get_jobs(
            {"filter": {"jobIds": [str(job_id)]}, "withEvents": True}
        )["jobs"]
        return dict(jobs[0])

    def wait_state(self, job_id: int | str, *states: str, timeout: float = 30) -> dict[str, Any]:
        wanted = {f"JOB_STATE_{s}" for s in states}
        return wait_for(
            lambda: (j := self.job(job_id))["state"] in wanted and j,
            timeout,
            f"job {job_id} to reach {states}",
        )


@pytest.fixture
def cmd(cluster: LocalCluster, tmp_path: pathlib.Path) -> Commands:
    work = tmp_path / "work"
    work.mkdir()
    return Commands(cluster, work)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False
