"""scancel: cancel or signal jobs by id, user, name, state, partition or account."""

from __future__ import annotations

import sys

from client.common import client, outcome_error, parse_job_state, run
from client.fmt import job_filter
from client.options import COUNT, FLAG, Option, OptionParser, answered
from client.views.accounting import Outcome
from corral import signals
from corral.errors import (
    CorralError,
    InvalidOption,
    InvalidRequest,
    JobStateConflict,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t

PROG = "scancel"

OPTIONS = (
    Option("A", "account", "account", help="act only on jobs charging these accounts"),
    Option("b", "batch", "batch", FLAG, help="signal the batch shell only"),
    Option("f", "full", "full", FLAG, help="signal the batch shell and its children too"),
    Option("i", "interactive", "interactive", FLAG, help="confirm each job"),
    Option("", "me", "me", FLAG, help="act only on your own jobs"),
    Option("n", "name", "name", help="act only on jobs with these names"),
    Option("", "jobname", "name", help="same as --name"),
    Option("p", "partition", "partition", help="act only on jobs in these partitions"),
    Option("Q", "quiet", "quiet", FLAG, help="no error messages"),
    Option("s", "signal", "signal", help="the signal to send (name or number)"),
    Option("t", "state", "state", help="act only on jobs in these states"),
    Option("u", "user", "user", help="act only on these users' jobs"),
    Option("v", "verbose", "verbose", COUNT, help="say what is done to each job"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="the version"),
)
PARSER = OptionParser(PROG, OPTIONS, usage="scancel [OPTIONS] [job_id[_array_id][.step_id]...]")


def parse_signal(value: str) -> int:
    """``TERM``, ``SIGUSR1``, ``10`` -> signal number (the one reader of signal names,
    ``corral.jobsyntax.signal_number``), refused in Slurm's words."""
    from corral.jobsyntax import signal_number  # only scancel -s pays for it

    try:
        return signal_number(value)
    except InvalidOption:
        raise InvalidOption(f"Unknown job signal: {value}") from None


def cancel(argv: list[str]) -> int:
    opts, job_ids = PARSER.parse(argv, permute=True)
    if answered(PARSER, opts):
        return 0
    args = _Args(job_ids, opts)
    sig = parse_signal(args.signal) if args.signal else 0  # a bad one before any RPC
    filters = (args.me, args.user, args.name, args.state, args.partition, args.account)
    if not job_ids and not any(filters):
        raise InvalidRequest("No job identification provided")
    flt: t.JobFilter = {}
    steps = [s for s in args.job_ids if _is_step(s)]
    args.job_ids = [s for s in args.job_ids if s not in steps]
    if steps:  # JOBID.STEP: those steps only
        request_steps: t.CancelJobsRequest = {
            "steps": [{"jobId": j, "stepId": int(st)} for j, st in (x.split(".") for x in steps)]
        }
        if sig:
            request_steps["signal"] = sig
        rc = report(client().cancel_jobs(request_steps), args.quiet, args.verbose)
        if not args.job_ids:
            return rc
    if args.job_ids:
        flt.update(job_filter(args.job_ids))
    api = client()
    if args.me:
        flt["users"] = [api.identity.user]
    if args.user:
        flt["users"] = [u for u in args.user.split(",") if u]
    if args.name:
        flt["names"] = [n for n in args.name.split(",") if n]
    if args.state:
        flt["states"] = [parse_job_state(s) for s in args.state.split(",") if s]
    if args.partition:
        flt["partitions"] = [x for x in args.partition.split(",") if x]
    if args.account:
        flt["accounts"] = [x for x in args.account.split(",") if x]
    if not flt:
        raise InvalidRequest("No job identification provided")
    if not ({"jobIds", "arrayTasks"} & flt.keys()):
        # filters act on active jobs only: Slurm skips finished ones, silently
        states = flt.get("states") or sorted(ACTIVE_STATES)
        active = [st for st in states if st in ACTIVE_STATES]
        if not active:
            return 0  # only finished states asked for: nothing to do
        flt["states"] = active
    if not ({"jobIds", "arrayTasks", "users"} & flt.keys()) and api.identity.uid != 0:
        # filters without ids or users mean "my jobs", so nobody gets others' denials
        flt["users"] = [api.identity.user]
    request: t.CancelJobsRequest = {"filter": flt}
    if sig:
        request["signal"] = sig
    if args.batch:  # the batch shell only; without -s, SIGKILL (a pending job: cancelled)
        request["batchOnly"] = True
        request.setdefault("signal", signals.SIGKILL)
    elif args.full and "signal" in request:  # the batch shell and its children too
        request["full"] = True
    return report(api.cancel_jobs(request), args.quiet, args.verbose, request.get("signal", 0))


def _is_step(word: str) -> bool:
    """JOBID.STEPID"""
    job, _, step = word.partition(".")
    return job.isdecimal() and step.isdecimal()


class _Args:
    """The parsed command line, by attribute."""

    def __init__(self, job_ids: list[str], opts: dict[str, object]) -> None:
        self.job_ids = job_ids
        self.user = str(opts.get("user") or "")
        self.name = str(opts.get("name") or "")
        self.state = str(opts.get("state") or "")
        self.partition = str(opts.get("partition") or "")
        self.account = str(opts.get("account") or "")
        self.signal = str(opts.get("signal") or "")
        self.batch = bool(opts.get("batch"))
        self.me = bool(opts.get("me"))
        self.full = bool(opts.get("full"))
        self.quiet = bool(opts.get("quiet"))
        self.verbose = int(opts.get("verbose") or 0)  # type: ignore[call-overload]


ACTIVE_STATES: set[t.JobState] = {"JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_COMPLETING"}


def _already_gone(error: CorralError | None) -> bool:
    """A job that has finished: nothing to do, said only with -v (Slurm 22.05). A job id
    that names no job is an error, as Slurm's check of the ids it is given prints it
    (``Kill job error on job id N: Invalid job id specified``, exit 1): a typo must not
    pass for a cancel."""
    return isinstance(error, JobStateConflict) and "completed" in error.message


def report(reply: t.CancelJobsResponse, quiet: bool, verbose: int = 0, sig: int = 0) -> int:
    rc = 0
    for outcome in map(Outcome, reply.get("outcomes", [])):
        if verbose:  # -v: what it does to each job first, as Slurm's
            what = f"Signal {sig} to job" if sig else "Terminating job"
            sys.stderr.write(f"{PROG}: {what} {outcome.job_ref}\n")
        if outcome.ok:
            continue
        gone = _already_gone(outcome_error(outcome.raw))
        if not gone:
            rc = 1
        if (not gone and not quiet) or (gone and verbose):
            sys.stderr.write(
                f"{PROG}: error: Kill job error on job id {outcome.job_ref}: {outcome.message}\n"
            )
    return rc


def main() -> None:
    run(PROG, lambda: cancel(sys.argv[1:]))


if __name__ == "__main__":
    main()
