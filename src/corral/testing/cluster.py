"""The real-process mode of the test harness: corral/localcluster's LocalCluster with
the helper API of harness.py, and ``ClusterFactory``, which starts any number of them
in a private base directory and stops them all (printing their last log lines).

The pytest fixtures (fixtures.py) and bench/ build their clusters here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.localcluster import cluster as _local
from corral.localcluster import containers
from corral.localcluster.layout import DEFAULT_GPU_MODEL, ctld_name, free_port
from corral.localcluster.pidfiles import stop_state_dir
from corral.testing.harness import Harness

# CORRAL_TEST_ISOLATION=container: the local-cluster tests run their nodes in containers
ISOLATION_ENV = "CORRAL_TEST_ISOLATION"

__all__ = [
    "DEFAULT_GPU_MODEL",
    "ClusterFactory",
    "LocalCluster",
    "free_port",
    "print_logs",
    "stop_state_dir",
]


class LocalCluster(_local.LocalCluster, Harness):
    """Real ctld and noded processes (corral/localcluster), with the harness's helper
    API: ``job``, ``state``, ``wait_state``, ``submit`` on its typed ``client()``."""


def print_logs(c: LocalCluster) -> None:
    """The daemons' last lines: pytest shows a test's captured output when it fails."""
    for name in [ctld_name(i) for i in range(c.controllers)] + c.node_names:
        print(f"----- {name} log -----\n{c.log_tail(name, 60)}")


class ClusterFactory:
    """Starts LocalClusters (or a subclass) under one private base directory, on free
    ports, and stops them all on ``close`` (printing their last log lines); the pytest
    fixtures and bench/ use it."""

    def __init__(
        self, cls: type[LocalCluster] = LocalCluster, prefix: str = "corral-test-"
    ) -> None:
        # world-readable: jobs of other users (tests that switch users) read the spool
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self.base.chmod(0o755)
        self.cls = cls
        self.started: list[LocalCluster] = []
        self.keep = False  # leave the state dirs (logs, store) for a look afterwards

    def __call__(
        self,
        configure: Callable[[Any], None] | None = None,
        start_timeout: float = 60.0,
        **kw: Any,
    ) -> LocalCluster:
        """A started cluster with these LocalCluster arguments; ``configure`` sees it
        before it starts."""
        kw.setdefault("kill_wait_s", 2.0)
        if os.environ.get(ISOLATION_ENV) and not kw.get("simulated"):
            # every process-node cluster in another mode (container: docs/image.md)
            kw["isolation"] = os.environ[ISOLATION_ENV]
        if kw.get("isolation") == "container":
            containers.refresh(containers.image())  # this tree's noded, not a stale one
        c = self.cls(self.base / f"cluster{len(self.started)}", **kw)
        if configure is not None:
            configure(c)
        self.started.append(c)
        c.start(timeout=start_timeout)
        return c

    def close(self, *, logs: bool = True) -> None:
        for c in self.started:
            c.stop()
            if logs:
                print_logs(c)
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> ClusterFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
