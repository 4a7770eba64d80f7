"""scontrol's writes to jobs and nodes: hold/release/requeue, ``update`` (a job's fields,
a node's state) and ``top``, and the lines it prints for each job an update failed."""

from __future__ import annotations

import sys

from client import nodepower
from client.common import client
from client.fmt import Reported, split_list
from client.jobids import resolve_job_ids
from client.views.accounting import Outcome
from corral.errors import CorralError, InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

HOLD_ACTIONS: dict[str, t.JobUpdateAction] = {
    "hold": "JOB_UPDATE_HOLD",
    "uhold": "JOB_UPDATE_USER_HOLD",
    "release": "JOB_UPDATE_RELEASE",
    "requeue": "JOB_UPDATE_REQUEUE",
    "requeuehold": "JOB_UPDATE_REQUEUE_HOLD",
}
INVALID_ID = "Invalid job id specified"  # ctld's words for an id that names no job


def hold_messages(outcomes: Sequence[t.CancelOutcome]) -> list[str]:
    """What scontrol prints for failed holds/releases: a line per job, then Slurm's
    ``slurm_suspend error`` line with the last error."""
    failed = [o for o in map(Outcome, outcomes) if not o.ok]
    lines = [f"{o.message} for job {o.job_ref}" for o in failed]
    if failed:
        lines.append(f"slurm_suspend error: {failed[-1].message}")
    return lines


def update_holds(action: str, words: Sequence[str]) -> int:
    if not words:
        raise Reported(f"too few arguments for keyword:{action}")
    if action.startswith("requeue"):
        # a job that requeues itself (submitit does, from its step) gets SIGTERM for it
        # at once: the command must still finish and exit 0, not die of its own request
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rc = 0
    for word in words:  # each argument is its own request, as in Slurm
        outcomes = _hold(action, word)
        lines = hold_messages(outcomes)
        if lines:
            sys.stderr.write("".join(line + "\n" for line in lines))
            rc = 1
    return rc


def job_ids(word: str) -> tuple[list[str], list[t.CancelOutcome]]:
    """ctld's ids for a job-id argument (``5``, ``5_1``: task 1 of array 5, ``5,7``), and
    a failed outcome for each id naming no job, worded as ctld words one."""
    ids, unknown = resolve_job_ids(word, "slurm_load_jobs error")
    return ids, [{"jobId": item, "message": INVALID_ID} for item in unknown]


def _hold(action: str, word: str) -> list[t.CancelOutcome]:
    ids, bad = job_ids(word)
    outcomes: list[t.CancelOutcome] = []
    if ids:
        reply = client().update_job({"jobIds": ids, "action": HOLD_ACTIONS[action]})
        outcomes = list(reply.get("outcomes", []))
    return outcomes + bad


UPDATE_KEYS = {
    "timelimit",
    "partition",
    "priority",
    "nice",
    "numnodes",
    "name",
    "jobname",
    "mailuser",
    "mailtype",
}


def update_request(words: Sequence[str]) -> tuple[t.UpdateJobRequest, list[t.CancelOutcome]]:
    """``update job N Key=Value...`` or ``update JobId=N Key=Value...`` as a request, and
    an outcome for each id naming no job."""
    from corral.slurmfmt import UNLIMITED, parse_duration

    ids: list[str] = []
    bad: list[t.CancelOutcome] = []
    request: t.UpdateJobRequest = {"action": "JOB_UPDATE_FIELDS"}
    rest = list(words)
    if rest and rest[0].lower() == "job" and len(rest) > 1:
        ids, bad = job_ids(rest[1])
        rest = rest[2:]
    for word in rest:
        key, eq, value = word.partition("=")
        lower = key.lower()
        if not eq:
            raise Reported(f"Invalid input: {word}\nRequest aborted")
        if lower in ("jobid", "job"):
            ids, bad = job_ids(value)
        elif lower == "timelimit":
            try:
                limit = parse_duration(value)
            except InvalidOption:
                raise Reported(f"Invalid TimeLimit value: {value}") from None
            request["timeLimitS"] = str(-1 if limit == UNLIMITED else limit)
        elif lower == "partition":
            request["partitions"] = split_list(value)
        elif lower in ("name", "jobname"):
            from corral.textcheck import check_one_line  # ctld's own check, made first

            request["name"] = check_one_line(value, "job name")
        elif lower == "mailuser":
            from corral.mailaddress import check_mail_user  # ctld's own check, made first

            request["mailUser"] = check_mail_user(value) if value else value
        elif lower == "mailtype":
            request["mailType"] = value
        elif lower in ("priority", "nice", "numnodes"):
            if not value.lstrip("-").isdigit():
                raise Reported(f"Invalid {key} value: {value}")
            if lower == "priority":
                request["priority"] = int(value)
            elif lower == "nice":
                request["nice"] = int(value)
            else:
                request["numNodes"] = int(value)
        else:
            raise Reported(f"Update of this parameter is not supported: {word}\nRequest aborted")
    if not ids and not bad:
        raise Reported("No job id specified\nRequest aborted")
    request["jobIds"] = ids
    return request, bad


def update_node_request(words: Sequence[str]) -> t.UpdateNodeRequest:
    """``update NodeName=n[1-2] State=DRAIN|RESUME|UNDRAIN|DOWN Reason=...`` as a request."""
    from corral import hostlist

    request: t.UpdateNodeRequest = {}
    for word in words:
        key, eq, value = word.partition("=")
        lower = key.lower()
        if not eq:
            raise Reported(f"Invalid input: {word}\nRequest aborted")
        if lower in ("nodename", "node"):
            try:
                request["names"] = hostlist.expand(value)
            except CorralError as exc:
                raise Reported(f"Invalid node name specified: {value} ({exc})") from None
        elif lower == "state":
            request["state"] = value.upper()
        elif lower == "reason":
            request["reason"] = value
        else:
            raise Reported(f"Update of this parameter is not supported: {word}\nRequest aborted")
    if not request.get("names"):
        raise Reported("No node name specified\nRequest aborted")
    if request.get("state") not in nodepower.NODE_UPDATE_STATES:
        raise Reported(f"Invalid node state specified: {request.get('state', '')}")
    return request


def update(words: Sequence[str]) -> int:
    if not words:
        raise Reported("too few arguments for keyword:update")
    if any(w.lower().startswith(("nodename=", "node=")) for w in words):
        client().update_node(update_node_request(words))
        return 0
    request, bad = update_request(words)
    outcomes: list[t.CancelOutcome] = []
    if request["jobIds"]:
        outcomes = list(client().update_job(request).get("outcomes", []))
    lines = hold_messages(outcomes + bad)
    if lines:
        sys.stderr.write(
            "".join(line.replace("slurm_suspend", "slurm_update") + "\n" for line in lines)
        )
        return 1
    return 0


def top(words: Sequence[str]) -> int:
    if not words:
        raise Reported("too few arguments for keyword:top")
    ids: list[str] = []
    bad: list[t.CancelOutcome] = []
    for word in words:
        more, unknown = job_ids(word)
        ids, bad = ids + more, bad + unknown
    outcomes: list[t.CancelOutcome] = []
    if ids:
        outcomes = list(
            client().update_job({"jobIds": ids, "action": "JOB_UPDATE_TOP"})["outcomes"]
        )
    lines = hold_messages(outcomes + bad)
    if lines:
        sys.stderr.write("".join(line + "\n" for line in lines))
        return 1
    return 0
