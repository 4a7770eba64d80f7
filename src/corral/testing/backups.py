"""A test cluster's store backed up and restored through the operator's own command
(``corral db backup``/``restore``, run as ``python -m ctld.db``: this package imports
no ctld), with the controllers stopped around a restore as the runbook says
(docs/operations.md, "Rollback"). The upgrade and rollback tests use it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.localcluster.layout import ctld_name
from corral.testing.cluster import LocalCluster


def corral_db(
    cluster: LocalCluster, *argv: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``corral db ARGV`` on the cluster's store (its config)."""
    done = subprocess.run(
        [cluster.python, "-m", "ctld.db", argv[0], "-f", str(cluster.config_path), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env=cluster.env(),
    )
    if check and done.returncode != 0:
        raise AssertionError(f"corral db {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return done


def backup(cluster: LocalCluster, path: Path) -> str:
    """Back the cluster's store up to ``path`` (online: its ctld keeps running)."""
    return corral_db(cluster, "backup", str(path)).stdout


def restore(cluster: LocalCluster, path: Path, *, start: bool = True) -> str:
    """Stop every controller, restore ``path`` as the store, start them again (unless
    ``start`` is False: a test that starts another version's ctld itself). The nodes keep
    running: they register again and are told which jobs they may keep."""
    for index in reversed(range(cluster.controllers)):  # the standbys first
        cluster.stop_process(ctld_name(index))
    out = corral_db(cluster, "restore", str(path)).stdout
    if start:
        for index in range(cluster.controllers):
            cluster.start_ctld(index=index)
    return out
