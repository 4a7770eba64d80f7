"""The one pytest fixture family for test clusters (a plugin: ``pytest_plugins =
["corral.testing.fixtures"]``).

- ``cluster``: a started LocalCluster, 2 nodes x 8 fake GPUs (real ctld and noded), on
  SQLite, or on the store an indirect parametrization names
  (``@pytest.mark.parametrize("cluster", ["sqlite", "postgresql"], indirect=True)``).
- ``cluster_factory`` / ``module_cluster_factory``: start LocalClusters with any of its
  arguments (``cluster_factory(nodes=1, isolation="auto")``), stopped at the end of the
  test (or module), with the daemons' last log lines printed for a failing test.
- ``inprocess_cluster``: an InProcessCluster, 2 nodes registered (store, state machine,
  recording dispatcher, manual clock); ``inprocess_factory`` for other shapes.
- ``store_url``: a fresh, empty store on each backend (a SQLite file, a PostgreSQL
  schema), for the tests that build ctld's Cluster with ``inprocess.make_cluster``.

Every cluster has the helper API of corral/testing/harness.py.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from corral.testing.cluster import ClusterFactory, LocalCluster
from corral.testing.inprocess import InProcessCluster
from corral.testing.postgres import pg_schema, pg_url_or_skip


@pytest.fixture
def cluster_factory() -> Iterator[ClusterFactory]:
    factory = ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def module_cluster_factory() -> Iterator[ClusterFactory]:
    factory = ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()


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


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A fresh, empty store on each backend: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/ctld.db"
        return
    with pg_schema(pg_url_or_skip()) as url:
        yield url


@pytest.fixture
def inprocess_factory(tmp_path: pathlib.Path) -> Iterator[Any]:
    made: list[InProcessCluster] = []

    def make(register: bool = True, **kw: Any) -> InProcessCluster:
        c = InProcessCluster(tmp_path / f"inproc{len(made)}", **kw)
        made.append(c)
        if register:
            c.register_nodes()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


@pytest.fixture
def inprocess_cluster(inprocess_factory: Any) -> InProcessCluster:
    c: InProcessCluster = inprocess_factory(nodes=2, gpus_per_node=8)
    return c
