"""corral why JOBID | NODE: why a pending job is not running, or why a node is as it is,
in plain words.

Reads ctld's ExplainJob (computed on the scheduler's own snapshot) and words it:
the reason, its rank, the running jobs it waits for and when they should end, what
the user could change to start sooner (only changes that really are sooner), the
advance reservations in its way, and when it is expected to start: by predicted run
times (the default) or, by limits, as a range corrected by history.
For a node (and for the nodes a pending job waits for): its state, Slurm's reason and
who set it, and its last change with its cause (ctld's node state machine: the event,
the RPC, report or monitor that made it, when). ``explain_text`` and ``node_text`` are
pure, for tests.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from client.common import client, job_state, node_state, num, real, text
from client.fmt import Reported, call, job_filter, parse_job_ids
from corral.errors import InvalidOption
from corral.reasons import EXPLAINED, Reason
from corral.slurmfmt import format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from client.common import Json

REASONS = EXPLAINED  # the one list of reasons, shared with ctld and its core


def _when(epoch: float, now: float) -> str:
    if epoch <= 0:
        return "unknown"
    delta = max(epoch - now, 0)
    if delta < 90:
        rel = f"in {int(delta)} s"
    elif delta < 5400:
        rel = f"in {round(delta / 60)} min"
    else:
        rel = f"in {delta / 3600:.1f} h"
    return f"{format_timestamp(epoch)} ({rel})"


def explain_text(reply: Json) -> str:
    job: Json = reply.get("job") or {}
    now = real(reply, "now")
    job_id = num(job, "jobId")
    state = job_state(job)
    requeued = _requeued(job)
    if state != "PENDING":
        where = f" on {text(job, 'nodelist')}" if text(job, "nodelist") else ""
        return f"Job {job_id} is not pending: it is {state}{where}.\n" + requeued
    reason = text(job, "reason") or "None"
    key, _, nodes = reason.partition(", UnavailableNodes:")
    meaning = REASONS.get(key, key)
    if nodes:
        meaning = f"the nodes it could run on are down or drained ({nodes})"
    lines = [
        f"Job {job_id} ({text(job.get('spec') or {}, 'name')}) is pending: {meaning} [{reason}]."
    ]
    if num(reply, "rank"):
        lines.append(
            f"Priority {num(job, 'priority')}: number {num(reply, 'rank')} in the queue of its "
            f"partition(s) ({num(reply, 'ahead')} job(s) ahead of it)."
        )
    blockers = reply.get("blockers") or []
    if blockers:
        lines.append("It waits for these running jobs to free what it needs:")
        for b in blockers:
            lines.append(
                f"  job {num(b, 'jobId')} of {text(b, 'user') or '?'} on {text(b, 'nodes')}: "
                f"at its limit {_when(real(b, 'expectedEnd'), now)}, likely "
                f"{_when(real(b, 'likelyEnd'), now)}"
            )
    lines.extend(_reservations(reply, job, now))
    forecast = real(reply, "forecastStart")
    if forecast and forecast <= now:
        lines.append("It fits now: the next scheduling pass should start it.")
    elif forecast and reply.get("predicted"):
        lines.append(
            f"Expected start: {_when(forecast, now)}, planned with the run times predicted "
            "from each user's history (a job that runs to its time limit delays it)."
        )
    elif forecast:
        ratio, count = real(reply, "historyRatio"), num(reply, "historyJobs")
        lines.append(
            f"Expected start: {_when(forecast, now)} if every running job uses its "
            "whole time limit."
        )
        if count:
            lines.append(
                f"Recent jobs used {ratio:.0%} of their limits (median of {count}), so more "
                f"likely {_when(real(reply, 'likelyStart'), now)}, possibly as early as "
                f"{_when(real(reply, 'earliestStart'), now)}."
            )
    elif reason in (Reason.RESOURCES, Reason.PRIORITY):
        lines.append("No start time is forecast yet (it is beyond the backfill plan's depth).")
    alternatives = reply.get("alternatives") or []
    if alternatives:
        lines.append("It would likely start sooner with (each change alone):")
        for a in alternatives:
            when = "at once" if a.get("now") else _when(real(a, "start"), now)
            lines.append(f"  {text(a, 'change')}: {when}")
    return "".join(line + "\n" for line in lines) + requeued


def _reservations(reply: Json, job: Json, now: float) -> list[str]:
    """The advance reservations it waits for: its own, to begin; others', on its nodes."""
    own = text(job.get("spec") or {}, "reservation")
    out = []
    for r in reply.get("reservations") or []:
        name, nodes = text(r, "name"), text(r, "nodes")
        start, end = real(r, "startTime"), real(r, "endTime")
        if name == own:
            out.append(f"It waits for its reservation {name} to begin: {_when(start, now)}.")
            continue
        until = f"until {_when(end, now)}" if end else "with no end"
        out.append(
            f"Reservation {name} holds {nodes} from {_when(start, now)} {until}: without it, "
            "it would start sooner."
        )
    return out


def _requeued(job: Json) -> str:
    """How its last run ended, for a requeued job (a node failure, a stalled rank)."""
    restarts = num(job, "restartCount")
    events = [e for e in job.get("events") or [] if text(e, "event") == "requeued"]
    if not restarts or not events:
        return ""
    return f"Requeued {restarts} time(s); the last run ended: {text(events[-1], 'detail')}.\n"


# what each event of ctld's node state machine (ctld/nodestate.py) means, in words
NODE_EVENTS = {
    "registered": "its noded registered",
    "late": "a heartbeat is late",
    "heard": "it heartbeats again",
    "heartbeat_lost": "silent past the heartbeat timeout: DOWN",
    "downed": "an operator set it DOWN",
    "resumed": "an operator resumed it (it registers again)",
    "drained": "its jobs finish, nothing new starts there",
    "undrained": "an operator resumed it from its drain",
    "fencing": "back with jobs it may not keep: fenced until they are gone",
    "fenced": "only its own jobs run there again",
}


def node_text(node: Json) -> str:
    """Why a node is as it is: state, reason (Slurm's, with who and when), last change."""
    name, state = text(node, "name"), node_state(node)
    star = "*" if node.get("notResponding") else ""
    lines = [f"Node {name} is {state}{star}."]
    why = node.get("reasonChange") or {}
    if text(node, "reason"):
        who = text(node, "reasonUser") or "root"
        stamp = format_timestamp(real(node, "reasonTime"))
        by = f", set by {_change(why)}" if text(why, "event") else ""
        lines.append(f"Reason: {text(node, 'reason')} [{who}@{stamp}]{by}.")
    last = node.get("lastChange") or {}
    if text(last, "event") and last != why:
        lines.append(f"Last change: {_change(last)}.")
    return "".join(line + "\n" for line in lines)


def _change(change: Json) -> str:
    """A node's change: its event in words, its cause, when."""
    event = text(change, "event")
    detail = f" ({text(change, 'detail')})" if text(change, "detail") else ""
    return (
        f"{event} ({NODE_EVENTS.get(event, event)}){detail}, cause {text(change, 'cause')}, "
        f"at {format_timestamp(real(change, 'time'))}"
    )


def _unavailable(reply: Json) -> list[str]:
    """The nodes a pending job's reason names as unavailable (ReqNodeNotAvail)."""
    job: Json = reply.get("job") or {}
    if job_state(job) != "PENDING":
        return []
    _, _, nodes = text(job, "reason").partition("UnavailableNodes:")
    return [nodes] if nodes else []


def _nodes(names: list[str]) -> list[Json]:
    reply = call(lambda: client().get_nodes({"names": names}), "corral why")
    return list(reply.get("nodes") or [])


def _job_id(value: str) -> str:
    """JOBID as ctld's job id: ``N`` (a job, or an array's first task), ``N_T`` (task T
    of array N, as squeue -j names it, looked up), ``N.batch`` / ``N.S`` (job N)."""
    if "_" not in value.split(".")[0]:
        return parse_job_ids(value)[0]
    flt = job_filter(value)
    reply = call(lambda: client().get_jobs({"filter": flt}), "corral why")
    jobs = reply.get("jobs") or []
    if not jobs:  # not one this user may see (controller.private_data)
        raise Reported("corral why: Invalid job id specified")
    return str(num(jobs[0], "jobId"))


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
            sys.stdout.write("".join(node_text(n) for n in _nodes([args.job])))
            return 0
        job_id = _job_id(args.job)
        reply = call(lambda: client().explain_job({"jobId": job_id}), "corral why")
        out = explain_text(reply)
        if names := _unavailable(reply):
            out += "".join(node_text(n) for n in _nodes(names))
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(out)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InvalidOption(f"{message} (usage: corral why JOBID|NODE)")
