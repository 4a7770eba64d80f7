"""What an operator sets for containers on a node ([containers] in the config).

Kept here, small, until the typed section of corral.config carries it; noded builds one
from that section (``from_config``) or uses these defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

GIB = 1 << 30


@dataclass(frozen=True)
class ContainersSettings:
    runtime: str = "crun"  # the OCI runtime's executable (crun: rootless, fast to start)
    cache_dir: str = ""  # "": <spool>/containers-cache
    cache_bytes: int = 50 * GIB  # the cache's size cap; least recently used images go first
    allow_registry: bool = True  # registry references are pulled (skopeo) when allowed
    # which image sources a job may name: squashfs, oci-dir, archive, registry
    sources: tuple[str, ...] = ("squashfs", "oci-dir", "archive", "registry")
    default_mounts: tuple[str, ...] = field(default_factory=tuple)  # SRC:DST[:FLAGS]
    import_timeout_s: float = 1800.0  # one import (a pull of a large image included)

    def cache_root(self, spool_dir: str) -> str:
        return self.cache_dir or os.path.join(spool_dir, "containers-cache")


def state_root(spool_dir: str) -> str:
    """The containers' state (bundles, crun's state, overlays): under the spool, which
    only root writes; each job's part of it is made per job (runtime.py)."""
    return os.path.join(spool_dir, "containers")
