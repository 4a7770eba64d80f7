"""corral why JOBID: why a pending job is not running, in plain words.

Reads ctld's ExplainJob (computed on the scheduler's own snapshot) and words it:
the reason, its rank, the running jobs it waits for and when they should end, what
the user could change to start sooner, and when it is expected to start, as a range.
``explain_text`` is pure, for tests.
"""

from __future__ import annotations

import sys

from client.common import client, job_state, num, real, text
from client.fmt import Reported, call, parse_job_ids
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
    forecast = real(reply, "forecastStart")
    if forecast:
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
        lines.append("It would start sooner with:")
        for a in alternatives:
            when = "at once" if a.get("now") else _when(real(a, "start"), now)
            lines.append(f"  {text(a, 'change')}: {when}")
    return "".join(line + "\n" for line in lines) + requeued


def _requeued(job: Json) -> str:
    """How its last run ended, for a requeued job (a node failure, a stalled rank)."""
    restarts = num(job, "restartCount")
    events = [e for e in job.get("events") or [] if text(e, "event") == "requeued"]
    if not restarts or not events:
        return ""
    return f"Requeued {restarts} time(s); the last run ended: {text(events[-1], 'detail')}.\n"


def main_args(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        raise InvalidOption("usage: corral why JOBID")
    (job_id,) = parse_job_ids(argv[0])
    try:
        reply = call(lambda: client().explain_job({"jobId": job_id}), "corral why")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    sys.stdout.write(explain_text(reply))
    return 0
