"""corral history JOBID | NODE: a job's story, or a node's recent changes, with causes.

A job's: every transition of ctld's job state machine, oldest first, with its time,
the states it moved between, its cause and detail (the web page's Story table), then
its earlier runs; read from QueryAccounting (``with_events``, ``duplicates``): the
store's record, so a job long finished still has its story. A node's: its recent
changes (GetNodes ``with_history``), kept in ctld's memory, the last
``corral.storytext.NODE_HISTORY`` of each node. The words are corral/storytext.py's.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from client.common import client
from client.fmt import Reported, call, parse_job_ids
from client.jobids import task_job_ids, task_key
from corral.errors import InvalidOption
from corral.storytext import job_story, node_history

WHAT = "corral history"


def _job_id(value: str) -> str:
    """JOBID as ctld's job id: ``N``, ``N_T`` (task T of array N, looked up), ``N.S``."""
    key = task_key(value)
    if key is None:
        return parse_job_ids(value)[0]
    found = task_job_ids([key], WHAT)
    if key not in found:  # not one this user may see (controller.private_data)
        raise Reported(f"{WHAT}: Invalid job id specified")
    return found[key]


def _job(value: str) -> str:
    job_id = _job_id(value)
    reply = call(
        lambda: client().query_accounting(
            {"filter": {"jobIds": [job_id]}, "duplicates": True, "withEvents": True}
        ),
        WHAT,
    )
    runs = [r for r in reply.get("jobs") or [] if str(r.get("jobId", "")) == job_id]
    if not runs:
        raise Reported(f"{WHAT}: Invalid job id specified")
    return job_story(list(runs))


def _node(name: str) -> str:
    reply = call(lambda: client().get_nodes({"names": [name], "withHistory": True}), WHAT)
    nodes = list(reply.get("nodes") or [])
    if not nodes:
        raise Reported(f"{WHAT}: Invalid node name specified")
    return "".join(node_history(n) for n in nodes)


def main_args(argv: list[str]) -> int:
    parser = _Parser(
        prog=WHAT,
        description="A job's story: every change of its state with its time, cause and "
        "detail, and its earlier runs. A node's recent changes with their causes.",
    )
    parser.add_argument(
        "target",
        metavar="JOBID|NODE",
        help="a job id, or ARRAYID_TASK (e.g. 11_5); or a node's name",
    )
    args = parser.parse_args(argv)
    try:
        # a node's name (job ids begin with a digit), as corral why tells them apart
        out = _node(args.target) if not args.target[:1].isdigit() else _job(args.target)
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(out)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InvalidOption(f"{message} (usage: corral history JOBID|NODE)")
