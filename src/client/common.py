"""What every command shares: the controller client, errors, job state names.

Commands import only the standard library and the light parts of ``corral`` (rest,
errors, slurmfmt, hostlist): they start in a few tens of milliseconds. Responses
are proto3 JSON: camelCase keys, default values omitted, 64-bit integers as
strings, enums by name. Commands read a reply's objects through ``client/views``
(typed properties, each with proto3's default); a reply's envelope (``jobs``, ``now``)
is its TypedDict, whose keys mypy checks.
"""

from __future__ import annotations

import sys

from corral.api import Controller, HttpController
from corral.errors import CorralError, from_wire

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from corral.wire import json_types as t


# Slurm's short state codes (squeue %t)
JOB_STATE_CODES = {
    "PENDING": "PD",
    "RUNNING": "R",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "PREEMPTED": "PR",
    "OUT_OF_MEMORY": "OOM",
    "REQUEUED": "RQ",
    "SUSPENDED": "S",
}
JOB_STATE_BY_CODE = {v: k for k, v in JOB_STATE_CODES.items()}
# the states the contract has, as its enum names (SUSPENDED has none: corral never suspends)
WIRE_JOB_STATE: dict[str, t.JobState] = {
    "PENDING": "JOB_STATE_PENDING",
    "RUNNING": "JOB_STATE_RUNNING",
    "COMPLETING": "JOB_STATE_COMPLETING",
    "COMPLETED": "JOB_STATE_COMPLETED",
    "FAILED": "JOB_STATE_FAILED",
    "CANCELLED": "JOB_STATE_CANCELLED",
    "TIMEOUT": "JOB_STATE_TIMEOUT",
    "NODE_FAIL": "JOB_STATE_NODE_FAIL",
    "PREEMPTED": "JOB_STATE_PREEMPTED",
    "OUT_OF_MEMORY": "JOB_STATE_OUT_OF_MEMORY",
    "REQUEUED": "JOB_STATE_REQUEUED",
}


def parse_job_state(name: str) -> t.JobState:
    """A user's state name or code ('pd', 'running') as the proto enum name."""
    upper = name.strip().upper()
    full = JOB_STATE_BY_CODE.get(upper, upper)
    if full not in WIRE_JOB_STATE:
        raise CorralError(f"Invalid job state specified: {name}")
    return WIRE_JOB_STATE[full]


def outcome_error(outcome: t.CancelOutcome) -> CorralError | None:
    """The error of one job's failed outcome (cancel, hold, update), as its class."""
    if outcome.get("ok"):
        return None
    return from_wire(outcome.get("error", ""), outcome.get("message", ""))


def die(prog: str, message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(code)


def run(prog: str, body: Callable[[], int], *, listing: bool = False) -> NoReturn:
    """Run a command body; a CorralError becomes Slurm's ``prog: error: ...`` and its code.

    ``listing``: a command that reads one answer, prints it and exits (squeue, sacct,
    sinfo) runs without the cyclic garbage collector. Its 100,000 rows of JSON hold no
    cycles, and the collector's passes over them took a third of building the rows."""
    if listing:
        import gc

        gc.disable()
    try:
        code = body()
    except CorralError as exc:
        if getattr(exc, "getopt", False):  # getopt's own words carry no "error: "
            sys.stderr.write(f"{prog}: {exc.message}\n")
            sys.exit(exc.exit_code)
        die(prog, exc.message, exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # `squeue | head`
        sys.exit(0)
    except Exception as exc:  # never a raw traceback to a user (CORRAL_DEBUG=1 shows it)
        import os

        if os.environ.get("CORRAL_DEBUG"):
            raise
        details = getattr(exc, "details", None)
        message = details() if callable(details) else str(exc)
        die(prog, f"{message or type(exc).__name__} (set CORRAL_DEBUG=1 for details)")
    sys.exit(code)


OPTION_ERROR_EXIT = 255  # sbatch, srun and salloc exit(-1) on a bad option or time


class option_errors:  # a context manager, used as a statement
    """Bad options and time formats found before anything is submitted end the
    command with 255, as Slurm's sbatch/srun/salloc; errors from the controller keep 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        from corral.errors import InvalidOption

        if isinstance(exc, InvalidOption):
            exc.exit_code = OPTION_ERROR_EXIT


def client() -> Controller:
    """The controller's typed client over HTTP/JSON (corral/api.py)."""
    return HttpController()
