"""The one error of the container path: a one-line reason the job fails with."""

from __future__ import annotations

from corral.errors import LaunchError


class ContainerError(LaunchError):
    """The container could not be prepared; ``str()`` is the reason sacct and ``corral
    why`` show (the launch path fails the job or step with it)."""
