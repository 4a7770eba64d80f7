"""The one error of the container path (defined in corral's error tree, corral/errors.py):
a one-line reason, ``container: ...``, the job or step fails with."""

from __future__ import annotations

from corral.errors import ContainerError

PREFIX = "container: "


def container_error(message: str) -> ContainerError:
    """The error whose text is the job's reason: ``container: <message>``."""
    return ContainerError(message if message.startswith(PREFIX) else PREFIX + message)


__all__ = ["PREFIX", "ContainerError", "container_error"]
