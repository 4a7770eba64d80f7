"""Shared fixtures: the cluster fixture family of corral/testing (real processes and
in-process), and ``Commands``, which runs the installed commands against a cluster."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from corral.testing import LocalCluster, wait_for
from corral.testing.cluster import ClusterFactory, print_logs

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

__all__ = ["BIN", "Commands", "pg_admin_url", "pg_schema", "pid_alive", "print_logs", "wait_for"]

# A PostgreSQL server the store tests may use: each test gets a schema of its own in it.
# .ci/run starts one and sets this; in CI (CI=true) a missing one is an error, not a skip.
PG_URL_ENV = "CORRAL_TEST_PG_URL"


def pg_admin_url() -> str | None:
    url = os.environ.get(PG_URL_ENV, "")
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {PG_URL_ENV} is not set: the PostgreSQL store tests must run")
    return None


def pg_url_or_skip() -> str:
    admin = pg_admin_url()
    if admin is None:
        pytest.skip(f"no PostgreSQL: set {PG_URL_ENV} (.ci/run does)")
    return admin


@contextlib.contextmanager
def pg_schema(admin: str) -> Iterator[str]:
    """A store URL on a fresh schema of the server of ``admin``, dropped afterwards."""
    import sqlalchemy as sa

    from ctld.store import normalize_url

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(normalize_url(admin))
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in admin else "?"
    try:
        yield f"{admin}{sep}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A fresh, empty store on each backend: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/ctld.db"
        return
    with pg_schema(pg_url_or_skip()) as url:
        yield url


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest, cluster_factory: ClusterFactory
) -> Iterator[LocalCluster]:
    """2 nodes x 8 fake GPUs; on SQLite, or on the store an indirect parametrization
    names (``@pytest.mark.parametrize("cluster", ["sqlite", "postgresql"], indirect=True)``)."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield cluster_factory(nodes=2, gpus_per_node=8)
        return
    with pg_schema(pg_url_or_skip()) as url:
        c = cluster_factory(nodes=2, gpus_per_node=8, store_url=url)
        try:
            yield c
        finally:
            c.stop()  # before its schema goes


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
