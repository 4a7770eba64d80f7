"""Whether this host can run containers, and if not, why (one line): the node
registers the ``container`` feature only when it can (noded/container_feature.py)."""

from __future__ import annotations

import os
import shutil

from corral.config import ContainersConfig
from corral.hybridcgroups import cgroup_blocker

TOOLS = ("fuse-overlayfs", "unsquashfs", "umoci", "skopeo")


def runtime_path(config: ContainersConfig) -> str | None:
    """The configured OCI runtime's executable (a path, or a name on PATH), or None."""
    runtime = config.runtime
    if "/" in runtime:
        return runtime if os.path.isfile(runtime) and os.access(runtime, os.X_OK) else None
    return shutil.which(runtime)


def why_not(config: ContainersConfig) -> str:
    """Why containers cannot run here ("" when they can)."""
    if runtime_path(config) is None:
        return f"the runtime {config.runtime} is not installed"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    return cgroup_blocker()
