"""corral why JOBID | NODE: why a pending job is not running, or why a node is as it is,
in plain words.

Reads ctld's ExplainJob (computed on the scheduler's own snapshot) and words it:
the reason, its rank, the running jobs it waits for and when they should end, what
the user could change to start sooner (only changes that really are sooner), the
advance reservations in its way, and when it is expected to start: by predicted run
times (the default) or, by limits, as a range corrected by history.
For a node (and for the nodes a pending job waits for): its state, Slurm's reason and
who set it, its last change with its cause (ctld's node state machine: the event,
the RPC, report or monitor that made it, when), and its recent changes before it
(``corral history NODE`` prints every one ctld keeps).
The words are corral/whytext.py's (ctld's web page shows the same).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from client.common import client
from client.fmt import Reported, call, parse_job_ids
from client.jobids import task_job_ids, task_key
from corral.errors import InvalidOption
from corral.storytext import recent_changes
from corral.whytext import REASONS, explain_text, node_text, unavailable_nodes

__all__ = ["REASONS", "explain_text", "main_args", "node_text"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.whytext import Json


def _job_id(value: str) -> str:
    """JOBID as ctld's job id: ``N`` (a job, or an array's first task), ``N_T`` (task T
    of array N, as squeue -j names it, looked up), ``N.batch`` / ``N.S`` (job N)."""
    key = task_key(value)
    if key is None:
        return parse_job_ids(value)[0]
    found = task_job_ids([key], "corral why")
    if key not in found:  # not one this user may see (controller.private_data)
        raise Reported("corral why: Invalid job id specified")
    return found[key]


def _nodes(names: list[str], history: bool = False) -> list[Json]:
    reply = call(lambda: client().get_nodes({"names": names, "withHistory": history}), "corral why")
    return list(reply.get("nodes") or [])


def main_args(argv: list[str]) -> int:
    parser = _Parser(
        prog="corral why",
        description="Why a job is not running: its reason, what it waits for (running "
        "jobs, reservations), when it should start, and what change would start it sooner. "
        "Why a node is as it is: its state, reason and last change with its cause.",
    )
    parser.add_argument(
        "job",
        metavar="JOBID|NODE",
        help="a job id, or ARRAYID_TASK (e.g. 11_5); or a node's name",
    )
    args = parser.parse_args(argv)
    try:
        if not args.job[:1].isdigit():  # a node's name (job ids begin with a digit)
            nodes = _nodes([args.job], history=True)
            sys.stdout.write("".join(node_text(n) + recent_changes(n) for n in nodes))
            return 0
        job_id = _job_id(args.job)
        reply = call(lambda: client().explain_job({"jobId": job_id}), "corral why")
        out = explain_text(reply)
        if names := unavailable_nodes(reply):
            out += "".join(node_text(n) for n in _nodes(names))
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(out)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InvalidOption(f"{message} (usage: corral why JOBID|NODE)")
