"""Whether this node can run containers: the ``container`` node feature it registers
(NodeResources.features; docs/containers.md). Kept to one question so the container
runtime (noded/containers/) can tighten it without touching registration."""

from __future__ import annotations

import structlog

from corral.config import CONTAINER_FEATURE, ContainersConfig
from noded.containers.hostcheck import runtime_path, why_not

log = structlog.get_logger("noded")


def node_features(config: ContainersConfig, node: str) -> list[str]:
    """The features this node offers: ``container`` when it can run containers (its
    runtime and tools are there, and the host lets crun run: hostcheck.py)."""
    why = why_not(config)
    if why:
        log.warning(
            "containers cannot run here: jobs asking for one are not placed here",
            node=node,
            runtime=config.runtime,
            why=why,
        )
        return []
    log.info("container runtime found", node=node, runtime=runtime_path(config))
    return [CONTAINER_FEATURE]
