"""Whether this node can run containers: the ``container`` node feature it registers
(NodeResources.features; docs/containers.md). Kept to one question so the container
runtime (noded/containers/) can tighten it without touching registration."""

from __future__ import annotations

import os
import shutil

import structlog

from corral.config import CONTAINER_FEATURE, ContainersConfig

log = structlog.get_logger("noded")


def runtime_path(config: ContainersConfig) -> str | None:
    """The configured OCI runtime's executable (a path, or a name on PATH), or None."""
    runtime = config.runtime
    if "/" in runtime:
        return runtime if os.path.isfile(runtime) and os.access(runtime, os.X_OK) else None
    return shutil.which(runtime)


def node_features(config: ContainersConfig, node: str) -> list[str]:
    """The features this node offers: ``container`` when its runtime is there."""
    found = runtime_path(config)
    if found is None:
        log.warning(
            "no container runtime: jobs asking for a container are not placed here",
            node=node,
            runtime=config.runtime,
        )
        return []
    log.info("container runtime found", node=node, runtime=found)
    return [CONTAINER_FEATURE]
