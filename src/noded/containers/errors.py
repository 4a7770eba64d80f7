"""The one error of the container path: a one-line reason the job fails with."""

from __future__ import annotations

from corral.errors import LaunchError

PREFIX = "container: "


class ContainerError(LaunchError):
    """The container could not be prepared; ``str()`` is the reason sacct and ``corral
    why`` show (the launch path fails the job or step with it), ``container: ...``."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message if message.startswith(PREFIX) else PREFIX + message)
