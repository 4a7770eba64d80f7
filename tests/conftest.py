"""Shared fixtures: the cluster fixture family of corral/testing (real processes and
in-process: ``cluster``, ``cluster_factory``, ``inprocess_cluster``, ``store_url``, ...,
all from corral/testing/fixtures.py, none redefined here), and ``Commands``, which runs
the installed commands against a cluster."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import settings

from corral.testing import LocalCluster, wait_for
from corral.testing.cluster import print_logs
from corral.testing.postgres import pg_admin_url, pg_schema, pg_url_or_skip

pytest_plugins = ["corral.testing.fixtures"]

# Property tests explore new inputs on every local run; CI replays a fixed sequence
# (derandomized) so that a merge is judged on the code, not on the draw. What a local
# run finds becomes a fix and, where it helps, an @example.
settings.register_profile("ci", derandomize=True, print_blob=True)
if (
    os.environ.get("CI", "").lower() == "true"
    or os.environ.get("CORRAL_HYPOTHESIS_PROFILE") == "ci"
):
    settings.load_profile("ci")

BIN = pathlib.Path(sys.executable).parent

__all__ = [
    "BIN",
    "Commands",
    "pg_admin_url",
    "pg_schema",
    "pg_url_or_skip",
    "pid_alive",
    "print_logs",
    "wait_for",
]


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
        return self.cluster.job(job_id)

    def wait_state(self, job_id: int | str, *states: str, timeout: float = 30) -> dict[str, Any]:
        return self.cluster.wait_state(job_id, *states, timeout=timeout)


@pytest.fixture
def cmd(cluster: LocalCluster, tmp_path: pathlib.Path) -> Commands:
    work = tmp_path / "work"
    work.mkdir()
    return Commands(cluster, work)


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
