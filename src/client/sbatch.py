"""sbatch: submit a batch script (Slurm-compatible flags, #SBATCH directives, output)."""

from __future__ import annotations

import os
import sys

from client.common import client, option_errors, run
from client.jobopts import build_parser, ignored_warnings, merge, submit_line, to_spec
from client.options import answered
from corral.errors import ControllerUnavailable, CorralError, InvalidOption, InvalidRequest

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

    from corral.wire import json_types as t

PROG = "sbatch"
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"


def _read_script(path: str | None) -> tuple[str, str]:
    """The script text and its default job name (file name, or 'sbatch' for stdin)."""
    if path is None:
        if sys.stdin.isatty():
            raise InvalidOption("no batch script given (and standard input is a terminal)")
        return sys.stdin.read(), "sbatch"
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read(), os.path.basename(path)
    except OSError as exc:
        raise InvalidRequest(f"Unable to open file {path}: {exc.strerror}") from None


def submit(argv: list[str]) -> int:
    with option_errors():  # a bad option or time: 255; the controller's refusals: 1
        prepared = _prepare(argv)
    if prepared is None:
        return 0
    return _send(*prepared)


def _prepare(argv: list[str]) -> tuple[t.JobSpec, dict[str, Any]] | None:
    """The job spec and options from the command line and script (None: help shown)."""
    parser = build_parser(PROG)
    cli, rest = parser.parse(argv)
    if answered(parser, cli):
        return None
    wrap = cli.pop("wrap", None)
    script_path = rest[0] if rest else None
    script_args = rest[1:]
    if wrap is not None:
        if script_path is not None:
            raise InvalidOption("script arguments not permitted with --wrap option")
        script, default_name = WRAP_HEADER + wrap + "\n", "wrap"
    else:
        script, default_name = _read_script(script_path)
    if not script.startswith("#!"):
        raise InvalidRequest(
            "This does not look like a batch script.  The first line must "
            "start with #! followed by the path to an interpreter.\n"
            "For instance: #!/bin/sh"
        )
    environ = dict(os.environ)
    opts = merge(parser, cli, script, environ)
    spec = to_spec(
        opts,
        script=script,
        argv=script_args,
        environ=environ,
        cwd=os.getcwd(),
        submit_line=submit_line([PROG, *argv]),
        default_name=default_name,
    )
    if script_path is not None:
        spec["command"] = os.path.abspath(script_path)
    if not opts.get("quiet"):
        for line in ignored_warnings(PROG, opts):
            sys.stderr.write(line + "\n")
    return spec, opts


def _send(spec: t.JobSpec, opts: dict[str, Any]) -> int:
    if opts.get("test_only"):
        return _test_only(spec)
    try:
        reply = client().submit_job({"spec": spec})
    except CorralError as exc:
        if isinstance(exc, ControllerUnavailable):
            raise
        raise type(exc)(f"Batch job submission failed: {exc.message}") from None
    job_id = reply.get("jobId", "0")
    if opts.get("parsable"):
        sys.stdout.write(f"{job_id}\n")
    elif not opts.get("quiet"):
        sys.stdout.write(f"Submitted batch job {job_id}\n")
    sys.stdout.flush()
    if opts.get("wait"):
        return wait_for_job(str(job_id))
    return 0


def _test_only(spec: t.JobSpec) -> int:
    """Slurm's --test-only line (on stderr): the expected start, CPUs, nodes, partition."""
    from corral.slurmfmt import format_timestamp
    from corral.wire.views import as_float, as_int, as_str

    try:
        reply = client().submit_job({"spec": spec, "testOnly": True})
    except CorralError as exc:
        if isinstance(exc, ControllerUnavailable):
            raise
        raise type(exc)(f"Job verification failed: {exc.message}") from None
    est = reply.get("estimate") or {}
    start = as_float(est.get("start"))
    when = format_timestamp(start) if start else "Unknown"
    sys.stderr.write(
        f"sbatch: Job {reply.get('jobId', '0')} to start at {when} using "
        f"{as_int(est.get('cpus'))} processors on nodes {as_str(est.get('nodes')) or '(null)'} "
        f"in partition {as_str(est.get('partition'))}\n"
    )
    return 0


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}


def wait_for_job(job_id: str) -> int:
    """-W: return when the job (every task of an array) has ended, with its exit code:
    the highest of the tasks', 1 for one ended by a signal (Slurm's rule)."""
    import time

    from client.views.job import Job

    api = client()
    delay = 0.1
    while True:
        jobs = [Job(j) for j in api.get_jobs({"filter": {"jobIds": [job_id]}}).get("jobs", [])]
        if jobs and all(j.state_name in FINAL for j in jobs):
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)  # short jobs return fast; long ones cost little
    return max(1 if j.exit_signal else j.exit_code for j in jobs)


def main() -> None:
    run(PROG, lambda: submit(sys.argv[1:]))


if __name__ == "__main__":
    main()
