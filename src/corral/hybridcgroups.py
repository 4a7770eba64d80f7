"""Whether crun can run on this host's cgroup layout: shared by noded (the container
feature, noded/containers/hostcheck.py) and the test images (corral/testing/images.py),
which may not import noded."""

from __future__ import annotations

HYBRID_CONTROLLERS = "/sys/fs/cgroup/unified/cgroup.controllers"


def cgroup_blocker() -> str:
    """crun refuses a hybrid cgroup hierarchy that leaves a controller on the v2 side
    (even with --cgroup-manager=disabled); "" when there is none."""
    try:
        with open(HYBRID_CONTROLLERS) as f:
            left = f.read().split()
    except OSError:
        return ""
    if not left:
        return ""
    return (
        f"crun refuses a hybrid cgroup hierarchy with controllers on v2 ({' '.join(left)}); "
        "mount them on v1 (docs/containers-runtime.md)"
    )
