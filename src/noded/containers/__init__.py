"""Pyxis-compatible containers on a node: images imported into a per-node cache, run
unprivileged with crun (docs/containers-runtime.md).

``images`` and ``cache`` turn an image reference into a read-only root filesystem in the
cache; ``bundle`` writes crun's config.json for one task; ``runtime`` owns a container's
life (its overlay, its tasks' argv, its teardown); ``sweep`` removes what a crashed noded
left.
"""

from noded.containers.errors import ContainerError

__all__ = ["ContainerError"]
