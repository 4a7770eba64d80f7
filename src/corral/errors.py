"""The one error hierarchy of corral.

Every error a user or operator can see is a leaf of this tree. Each class names the
gRPC status it travels as and the exit code a command ends with, so ctld, the HTTP
gateway and the commands agree without a lookup table elsewhere::

    CorralError                  UNKNOWN              exit 1
    ├── ConfigError              FAILED_PRECONDITION  exit 1  bad cluster config (names the key)
    ├── InvalidRequest           INVALID_ARGUMENT     exit 1  malformed or impossible request
    │   ├── InvalidOption        INVALID_ARGUMENT     exit 1  bad flag or #SBATCH directive
    │   ├── InvalidPartition     INVALID_ARGUMENT     exit 1  "Invalid partition name specified"
    │   ├── InvalidAccount       INVALID_ARGUMENT     exit 1  "Invalid account or account/..."
    │   ├── InvalidQos           INVALID_ARGUMENT     exit 1  "Invalid qos specification"
    │   ├── DependencyProblem    INVALID_ARGUMENT     exit 1  "Job dependency problem"
    │   └── NodeConfigUnavailable INVALID_ARGUMENT    exit 1  "Requested node configuration ..."
    ├── InvalidJobId             NOT_FOUND            exit 1  "Invalid job id specified"
    ├── InvalidNodeName          NOT_FOUND            exit 1  "Invalid node name specified"
    ├── PermissionDenied         PERMISSION_DENIED    exit 1  "Access/permission denied"
    ├── JobStateConflict         FAILED_PRECONDITION  exit 1  "Job/step already completing ..."
    ├── StepBusy                 RESOURCE_EXHAUSTED   exit 1  other steps hold what a step needs
    ├── InvalidTransition        INTERNAL             exit 1  state-machine bug (impossible move)
    ├── StoreError               UNAVAILABLE          exit 1  the durable store failed
    └── ControllerUnavailable    UNAVAILABLE          exit 1  "Unable to contact slurm controller"

Slurm's commands end with exit code 1 for all of these; the messages above are
Slurm's own where it has one, so scripts that grep for them keep working.

This module imports nothing heavy: the short-lived commands use it.
"""

from __future__ import annotations


class CorralError(Exception):
    """Base of every corral error. ``grpc_code`` is a grpc.StatusCode name."""

    grpc_code = "UNKNOWN"
    exit_code = 1
    slurm_message = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.slurm_message or self.__class__.__name__)

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(CorralError):
    grpc_code = "FAILED_PRECONDITION"


class InvalidRequest(CorralError):
    grpc_code = "INVALID_ARGUMENT"


class InvalidOption(InvalidRequest):
    pass


class InvalidPartition(InvalidRequest):
    slurm_message = "Invalid partition name specified"


class InvalidAccount(InvalidRequest):
    slurm_message = "Invalid account or account/partition combination specified"


class InvalidQos(InvalidRequest):
    slurm_message = "Invalid qos specification"


class DependencyProblem(InvalidRequest):
    slurm_message = "Job dependency problem"


class NodeConfigUnavailable(InvalidRequest):
    slurm_message = "Requested node configuration is not available"


class InvalidJobId(CorralError):
    grpc_code = "NOT_FOUND"
    slurm_message = "Invalid job id specified"


class InvalidNodeName(CorralError):
    grpc_code = "NOT_FOUND"
    slurm_message = "Invalid node name specified"


class PermissionDenied(CorralError):
    grpc_code = "PERMISSION_DENIED"
    slurm_message = "Access/permission denied"


class Unauthenticated(PermissionDenied):
    """The request proves no identity (no credential, or one that does not verify)."""

    grpc_code = "UNAUTHENTICATED"


class TooLarge(InvalidRequest):
    """A field, list or message over its size limit (corral.limits)."""


class JobStateConflict(CorralError):
    grpc_code = "FAILED_PRECONDITION"
    slurm_message = "Job/step already completing or completed"


class StepBusy(CorralError):
    """Other steps of the job hold the CPUs or GPUs a new step needs: srun retries."""

    grpc_code = "RESOURCE_EXHAUSTED"
    slurm_message = "Requested nodes are busy"


class InvalidTransition(CorralError):
    grpc_code = "INTERNAL"


class StoreError(CorralError):
    grpc_code = "UNAVAILABLE"


class ControllerUnavailable(CorralError):
    grpc_code = "UNAVAILABLE"
    slurm_message = "Unable to contact slurm controller (connect failure)"


def _leaves(cls: type[CorralError]) -> list[type[CorralError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_leaves(sub))
    return out


#: Error class by name, for rebuilding an error that crossed the wire.
BY_NAME: dict[str, type[CorralError]] = {c.__name__: c for c in _leaves(CorralError)}


def from_wire(name: str, message: str) -> CorralError:
    """Rebuild the error ctld raised from its class name and message."""
    return BY_NAME.get(name, CorralError)(message)
