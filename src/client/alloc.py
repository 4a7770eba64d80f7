"""Getting an allocation for salloc and srun: submit, wait in the queue, release.

Both print Slurm's messages on stderr (``PROG: job N queued and waiting for
resources``, ``PROG: job N has been allocated resources``) and poll ctld's gateway
until the job runs; Ctrl-C while waiting cancels the request.
"""

from __future__ import annotations

import os
import sys
import time

from client.common import option_errors
from client.jobopts import JOB_OPTIONS, ignored_warnings, submit_line, to_spec
from client.options import Option
from corral import signals
from corral.errors import AllocationRevoked, CorralError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from corral.api import Controller
    from corral.wire import json_types as t

#: sbatch options that mean nothing for an allocation (or mean something else in srun)
NOT_FOR_ALLOCATIONS = {
    "wrap",
    "parsable",
    "array",
    "wait",
    "output",
    "error",
    "input",
    "open_mode",
    "signal",
    "quiet",
    "verbose",
    "help",
    "version",
}


def allocation_options() -> list[Option]:
    return [o for o in JOB_OPTIONS if o.dest not in NOT_FOR_ALLOCATIONS]


def request_allocation(
    api: Controller, prog: str, opts: dict[str, Any], argv: list[str], name: str
) -> str:
    """Submit an allocation-only job and wait until it runs; returns its id."""
    environ = dict(os.environ)
    with option_errors():  # a bad time or option: 255, as Slurm's srun/salloc
        spec = to_spec(
            opts,
            script="",
            argv=[],
            environ=environ,
            cwd=os.getcwd(),
            submit_line=submit_line([prog, *argv]),
            default_name=name,
        )
    spec["allocationOnly"] = True
    spec.pop("argv", None)
    for line in ignored_warnings(prog, opts):
        say(prog, line.removeprefix(f"{prog}: "))
    try:
        reply = api.submit_job({"spec": spec})
    except CorralError as exc:
        raise type(exc)(f"Unable to allocate resources: {exc.message}") from None
    job_id = str(reply.get("jobId", "0"))
    if prog == "salloc":
        say(prog, f"Pending job allocation {job_id}")
    hung_up = {s: signals.set_handler(s, _interrupt) for s in (signals.SIGTERM, signals.SIGHUP)}
    try:
        wait_running(api, prog, job_id)
    except KeyboardInterrupt:
        api.cancel_jobs({"filter": {"jobIds": [job_id]}})
        say(prog, f"Job allocation {job_id} has been revoked.")
        raise
    finally:
        for sig, handler in hung_up.items():
            signals.set_handler(sig, handler)
    return job_id


def _interrupt(signum: int, frame: object) -> None:
    # a closed terminal or a kill while waiting withdraws the request, like Ctrl-C
    raise KeyboardInterrupt


def wait_running(api: Controller, prog: str, job_id: str) -> t.Job:
    queued_said = False
    started = time.monotonic()
    while True:
        jobs = api.get_jobs({"filter": {"jobIds": [job_id]}}).get("jobs", [])
        job: t.Job = jobs[0] if jobs else {}
        state = job.get("state", "")
        if state == "JOB_STATE_RUNNING":
            if queued_said:
                say(prog, f"job {job_id} has been allocated resources")
            if prog == "salloc":
                say(prog, f"Granted job allocation {job_id}")
            return job
        if state not in ("JOB_STATE_PENDING", ""):
            raise AllocationRevoked(
                f"Unable to allocate resources: job {job_id} is "
                f"{state.removeprefix('JOB_STATE_')} ({job.get('reason', 'None')})"
            )
        if not queued_said and time.monotonic() - started > 0.3:
            say(prog, f"job {job_id} queued and waiting for resources")
            queued_said = True
        # ctld starts a job that fits within milliseconds of its submit: look again soon,
        # then less and less often (a job that waits in the queue costs few calls)
        waited = time.monotonic() - started
        time.sleep(0.003 if waited < 0.05 else 0.02 if waited < 0.5 else 0.1 if waited < 5 else 0.5)


def release(
    api: Controller, prog: str, job_id: str, exit_code: int, exit_signal: int = 0, reason: str = ""
) -> None:
    """``reason``: why its step could not start (a node's refusal), the job's reason."""
    if prog == "salloc":
        say(prog, f"Relinquishing job allocation {job_id}")
    ended: t.CompleteJobRequest = {"jobId": job_id, "exitCode": exit_code}
    ended["exitSignal"] = exit_signal
    if reason:
        ended["reason"] = reason[:1024]
    try:
        api.complete_job(ended)
    except CorralError as exc:
        say(prog, f"error: releasing job {job_id}: {exc.message}")


def say(prog: str, message: str) -> None:
    sys.stderr.write(f"{prog}: {message}\n")
    sys.stderr.flush()


def allocation_environment(raw: t.Job, cluster: str) -> dict[str, str]:
    """What salloc puts in its command's environment: the allocation's SLURM_*, built by
    the same code as the batch script's and each task's (corral/jobenv.py)."""
    from google.protobuf import json_format

    from corral.jobenv import allocation_variables
    from corral.wire import corral_pb2 as pb

    job = json_format.ParseDict(dict(raw), pb.Job(), ignore_unknown_fields=True)
    return allocation_variables(job, cluster)
