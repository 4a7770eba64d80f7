"""``corral why``'s words: a pending job's ExplainJob reply, or a node, as text.

Pure (the reply in proto3's JSON mapping in, text out): the command prints it and
ctld's web page shows the same words on a job's page, so the two never disagree.
"""

from __future__ import annotations

from corral import ettr, nodewords
from corral.reasons import EXPLAINED, WAITS_ITS_TURN, reason_words
from corral.slurmfmt import format_elapsed, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Json = Mapping[str, Any]  # a proto3-JSON object (a reply's TypedDict, or any dict)

REASONS = EXPLAINED  # the one list of reasons, shared with ctld and its core


def num(obj: Json, key: str, default: int = 0) -> int:
    try:
        return int(obj.get(key, default))
    except (TypeError, ValueError):
        return default


def real(obj: Json, key: str, default: float = 0.0) -> float:
    try:
        return float(obj.get(key, default))
    except (TypeError, ValueError):
        return default


def text(obj: Json, key: str, default: str = "") -> str:
    value = obj.get(key, default)
    return value if isinstance(value, str) else default


def job_state(job: Json) -> str:
    return text(job, "state", "JOB_STATE_PENDING").removeprefix("JOB_STATE_")


def _when(epoch: float, now: float) -> str:
    """A time with how far it is from now: "in 5 min", or "3 min ago" once past."""
    if epoch <= 0:
        return "unknown"
    delta = epoch - now
    far = abs(delta)
    if far < 90:
        span = f"{int(far)} s"
    elif far < 5400:
        span = f"{round(far / 60)} min"
    else:
        span = f"{far / 3600:.1f} h"
    rel = f"{span} ago" if delta < -0.5 else f"in {span}"
    return f"{format_timestamp(epoch)} ({rel})"


def explain_text(reply: Json) -> str:
    job: Json = reply.get("job") or {}
    now = real(reply, "now")
    job_id = num(job, "jobId")
    state = job_state(job)
    requeued = _requeued(job) + _interrupted(job, now)
    if state != "PENDING":
        where = f" on {text(job, 'nodelist')}" if text(job, "nodelist") else ""
        ended = text(job, "reason") if state not in ("RUNNING", "COMPLETED") else ""
        why = f": {ended}" if ended and ended != "None" else ""  # a launch's failure
        return f"Job {job_id} is not pending: it is {state}{where}{why}.\n" + requeued
    # squeue's reason, in the words the web queue uses too (corral/reasons.py)
    reason = text(job, "reason") or "None"
    lines = [
        f"Job {job_id} ({text(job.get('spec') or {}, 'name')}) is pending: "
        f"{reason_words(reason)} [{reason}]."
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
    elif reason in WAITS_ITS_TURN:
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
        since = "since" if start <= now else "from"
        kind = " (maintenance)" if "MAINT" in (r.get("flags") or []) else ""
        out.append(
            f"Reservation {name}{kind} holds {nodes} {since} {_when(start, now)} {until}: "
            "without it, it would start sooner."
        )
    return out


def _requeued(job: Json) -> str:
    """How its last run ended, for a requeued job (a node failure, a stalled rank)."""
    restarts = num(job, "restartCount")
    events = [e for e in job.get("events") or [] if text(e, "event") == "requeued"]
    if not restarts or not events:
        return ""
    return f"Requeued {restarts} time(s); the last run ended: {text(events[-1], 'detail')}.\n"


def _interrupted(job: Json, now: float) -> str:
    """A warned job's coming requeue, and what its interruptions cost (corral/ettr.py)."""
    out = ""
    if text(job, "disruption"):
        out += (
            f"Warned: {text(job, 'disruption')}; it is requeued once it exits (stopped "
            f"{_when(real(job, 'disruptionDeadline'), now)} if it has not).\n"
        )
    items = [i for i in job.get("interruptions") or [] if isinstance(i, dict)]
    if not items:
        return out
    figures = ettr.ettr(
        real(job, "firstStartTime"),
        real(job, "endTime"),
        [ettr.Interrupted(real(i, "time"), real(i, "lostS"), real(i, "nextStart")) for i in items],
        now,
    )
    causes: dict[str, int] = {}
    for i in items:
        causes[text(i, "cause")] = causes.get(text(i, "cause"), 0) + 1
    waiting = "" if real(items[-1], "nextStart") else " (the last one's still counting)"
    ratio = f"{figures.ratio:.1%}" if figures.ratio is not None else "-"
    return out + (
        f"Interruptions: {len(items)} ({', '.join(f'{c} {n}' for c, n in causes.items())}); "
        f"work lost since checkpoints {format_elapsed(round(figures.lost_s))}, restart "
        f"overhead {format_elapsed(round(figures.overhead_s))}{waiting}; ETTR {ratio} of "
        f"{format_elapsed(round(figures.wall_s))} since its first start.\n"
    )


# what each event of ctld's node state machine (ctld/model/nodestate.py) means, in words
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
    "powering_down": "power saving powers it down",
    "powered_down": "powered down",
    "powering_up": "powered up for a job (it registers when it is up)",
    "resume_failed": "not up within ResumeTimeout: DOWN",
    "suspend_failed": "could not be powered down: DOWN",
    "power_down_asked": "to be powered down once idle",
    "power_down_cancelled": "its power down was called off",
    "cloud": "a cloud node: powered down until a job needs it",
}


def node_state(node: Json) -> str:
    return text(node, "state", "NODE_STATE_UNKNOWN").removeprefix("NODE_STATE_")


def node_text(node: Json) -> str:
    """Why a node is as it is: state (with the reservation it is in, as scontrol and
    sinfo say it: corral/nodewords.py), reason (Slurm's, with who and when), last
    change."""
    name, state = text(node, "name"), node_state(node)
    star = "*" if node.get("notResponding") else ""
    resv, maint = text(node, "reservation"), bool(node.get("maint"))
    flags = nodewords.state_flags(resv, maint)
    lines = [f"Node {name} is {state}{star}{flags}."]
    if resv:
        kind = "maintenance reservation" if maint else "advance reservation"
        lines.append(f"It is in {kind} {resv}: only that reservation's jobs start there.")
    elif node.get("spare"):
        lines.append(
            "It is a hot spare of its partition: kept for a job requeued after a node failure."
        )
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


def unavailable_nodes(reply: Json) -> list[str]:
    """The nodes a pending job's reason names as unavailable (ReqNodeNotAvail)."""
    job: Json = reply.get("job") or {}
    if job_state(job) != "PENDING":
        return []
    _, _, nodes = text(job, "reason").partition("UnavailableNodes:")
    return [nodes] if nodes else []
