"""The one pytest fixture family for test clusters (a plugin: ``pytest_plugins =
["corral.testing.fixtures"]``).

- ``cluster``: a started LocalCluster, 2 nodes x 8 fake GPUs (real ctld and noded).
- ``cluster_factory`` / ``module_cluster_factory``: start LocalClusters with any of its
  arguments (``cluster_factory(nodes=1, isolation="auto")``), stopped at the end of the
  test (or module), with the daemons' last log lines printed for a failing test.
- ``inprocess_cluster``: an InProcessCluster, 2 nodes registered (store, state machine,
  recording dispatcher, manual clock); ``inprocess_factory`` for other shapes.

Every cluster has the helper API of corral/testing/harness.py.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from corral.testing.cluster import ClusterFactory, LocalCluster
from corral.testing.inprocess import InProcessCluster


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
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    return cluster_factory(nodes=2, gpus_per_node=8)


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
