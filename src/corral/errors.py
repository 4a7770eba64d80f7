"""The one error hierarchy of corral.

Every error a user or operator can see is a node of this tree, and every CorralError
subclass in the code base is defined here. Each class names the gRPC status it travels
as, the HTTP status the gateway answers with and the exit code a command ends with, so
ctld, noded, the gateway and the commands agree without a lookup table elsewhere::

    class                          gRPC status          HTTP exit
    CorralError                    UNKNOWN              500  1
    ├── ConfigError                FAILED_PRECONDITION  409  1  bad cluster config (names the key)
    │   └── GpuError               FAILED_PRECONDITION  409  1  noded: GPU backend unusable
    ├── InvalidRequest             INVALID_ARGUMENT     400  1  malformed or impossible request
    │   ├── InvalidOption          INVALID_ARGUMENT     400  1  bad flag or #SBATCH directive
    │   ├── InvalidPartition       INVALID_ARGUMENT     400  1  "Invalid partition name ..."
    │   ├── InvalidAccount         INVALID_ARGUMENT     400  1  "Invalid account or ..."
    │   ├── InvalidQos             INVALID_ARGUMENT     400  1  "Invalid qos specification"
    │   ├── AccountingPolicy       INVALID_ARGUMENT     400  1  "Job violates accounting/QOS ..."
    │   ├── DependencyProblem      INVALID_ARGUMENT     400  1  "Job dependency problem"
    │   ├── ReservationInvalid     INVALID_ARGUMENT     400  1  "Requested reservation is invalid"
    │   ├── NodeConfigUnavailable  INVALID_ARGUMENT     400  1  "Requested node configuration ..."
    │   │   └── StepLayoutError    INVALID_ARGUMENT     400  1  a step can never fit its allocation
    │   └── TooLarge               INVALID_ARGUMENT     400  1  a field over its limit (names both)
    ├── InvalidJobId               NOT_FOUND            404  1  "Invalid job id specified"
    ├── InvalidNodeName            NOT_FOUND            404  1  "Invalid node name specified"
    ├── PermissionDenied           PERMISSION_DENIED    403  1  "Access/permission denied"
    │   └── Unauthenticated        UNAUTHENTICATED      401  1  no credential, or one that fails
    ├── JobStateConflict           FAILED_PRECONDITION  409  1  "Job/step already completing ..."
    │   └── AllocationRevoked      FAILED_PRECONDITION  409  1  salloc: the allocation ended first
    ├── LaunchError                FAILED_PRECONDITION  409  1  noded: a job or step cannot start
    │   └── ContainerError         FAILED_PRECONDITION  409  1  noded: its container not made
    ├── VersionMismatch            FAILED_PRECONDITION  409  1  a newer major version than ctld's
    ├── StepBusy                   RESOURCE_EXHAUSTED   429  1  other steps hold what a step needs
    ├── InvalidTransition          INTERNAL             500  1  state-machine bug (impossible move)
    ├── StoreError                 UNAVAILABLE          503  1  the durable store failed
    │   └── StoreUnavailable       UNAVAILABLE          503  1  database away or full: no changes
    └── ControllerUnavailable      UNAVAILABLE          503  1  "Unable to contact slurm ..."
        ├── NodeUnreachable        UNAVAILABLE          503  1  ctld: a node agent did not answer
        └── NotPrimary             UNAVAILABLE          503  1  a standby ctld, or one deposed

Slurm's commands end with exit code 1 for all of these; the messages above are
Slurm's own where it has one, so scripts that grep for them keep working. An error
crosses the wire as its class name (gRPC trailing metadata ``x-corral-error``, or the
gateway's JSON ``error`` field) and is rebuilt as the same class by ``from_wire``.
tests/unit/test_errors.py checks this docstring against the classes.

This module imports nothing heavy: the short-lived commands use it.
"""

from __future__ import annotations

#: gRPC trailing-metadata key carrying the CorralError class name.
ERROR_METADATA_KEY = "x-corral-error"

#: The gateway's HTTP status for each gRPC status (Google's mapping, except
#: FAILED_PRECONDITION: 409, a conflict with the current state).
HTTP_STATUS: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


class CorralError(Exception):
    """Base of every corral error. ``grpc_code`` is a grpc.StatusCode name; a subclass
    that sets it gets the matching ``http_status`` from HTTP_STATUS."""

    grpc_code = "UNKNOWN"
    http_status = 500
    exit_code = 1
    slurm_message = ""

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if "grpc_code" in cls.__dict__ and "http_status" not in cls.__dict__:
            cls.http_status = HTTP_STATUS[cls.grpc_code]

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.slurm_message or self.__class__.__name__)

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(CorralError):
    grpc_code = "FAILED_PRECONDITION"


class GpuError(ConfigError):
    """The GPU backend cannot be used (NVML missing, driver not loaded, ...)."""


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


class AccountingPolicy(InvalidRequest):
    """A submission over an accounting limit (MaxSubmitJobs, MaxWall, MaxTRESPerJob...)."""

    slurm_message = (
        "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
    )


class DependencyProblem(InvalidRequest):
    slurm_message = "Job dependency problem"


class ReservationInvalid(InvalidRequest):
    slurm_message = "Requested reservation is invalid"


class NodeConfigUnavailable(InvalidRequest):
    slurm_message = "Requested node configuration is not available"


class StepLayoutError(NodeConfigUnavailable):
    """The step does not fit the allocation (srun: Unable to create step ...)."""


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


class AllocationRevoked(JobStateConflict):
    """The allocation salloc or srun waited for ended (cancelled, failed) first."""

    slurm_message = "Job allocation has been revoked"


class LaunchError(CorralError):
    """The job could not be started on this node (reported to ctld as launch failed)."""

    grpc_code = "FAILED_PRECONDITION"


class ContainerError(LaunchError):
    """The step's container could not be prepared (noded/containers); ``str()`` is the
    reason sacct and ``corral why`` show (``container: ...``, noded's container_error)."""

    grpc_code = "FAILED_PRECONDITION"


class VersionMismatch(CorralError):
    """A noded or a command of a newer major version than ctld's: the wire contract may
    have changed between majors, so ctld refuses it (ctld/control/versions.py)."""

    grpc_code = "FAILED_PRECONDITION"


class StepBusy(CorralError):
    """Other steps of the job hold the CPUs or GPUs a new step needs: srun retries."""

    grpc_code = "RESOURCE_EXHAUSTED"
    slurm_message = "Requested nodes are busy"


class InvalidTransition(CorralError):
    grpc_code = "INTERNAL"


class StoreError(CorralError):
    grpc_code = "UNAVAILABLE"


class StoreUnavailable(StoreError):
    """The database is unreachable or full: ctld refuses changes until it is back."""


class ControllerUnavailable(CorralError):
    grpc_code = "UNAVAILABLE"
    slurm_message = "Unable to contact slurm controller (connect failure)"


class NodeUnreachable(ControllerUnavailable):
    """A node agent did not answer (travels like ControllerUnavailable: UNAVAILABLE)."""


class NotPrimary(ControllerUnavailable):
    """This ctld is a standby (or was deposed: another holds the lease): clients move on
    to the next controller of the list, as from Slurm's backup in standby mode."""

    slurm_message = "slurmctld is in standby mode: not the primary controller"


def _tree(cls: type[CorralError]) -> list[type[CorralError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_tree(sub))
    return out


def all_errors() -> list[type[CorralError]]:
    """Every class of the tree, depth first (the order of the docstring)."""
    return _tree(CorralError)


#: Error class by name, for rebuilding an error that crossed the wire.
BY_NAME: dict[str, type[CorralError]] = {c.__name__: c for c in all_errors()}


def from_wire(name: str, message: str) -> CorralError:
    """Rebuild the error ctld raised from its class name and message."""
    return BY_NAME.get(name, CorralError)(message)
