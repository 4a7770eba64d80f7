"""A job's story and a node's recent changes as plain text: ``corral history``'s words.

A job's story is every transition ctld's job state machine made (ctld/model/jobstate.py), in
order, each with its time, the state it moved from and to, the cause (the RPC, pass,
report or timer that made it) and its detail, as the web page's Story table shows it;
then its earlier runs, if it was requeued. A node's history is its recent changes
(ctld/model/nodestate.py: the event, its cause and detail), oldest first. Each field is one
line whatever it holds (a detail can carry a path or a message with control
characters: none reaches the terminal).

Pure: JSON replies in (proto3 JSON, as the commands read them), text out.
"""

from __future__ import annotations

from corral.slurmfmt import format_timestamp
from corral.textcheck import one_line
from corral.whytext import NODE_EVENTS, job_state, node_state, num, real, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.whytext import Json

# a node's recent changes ctld keeps (in memory, per node: ctld/model/nodes.py): a flapping
# node's late/heard pairs push its older changes out, so many nodes cost little each
NODE_HISTORY = 24
JOB_COLUMNS = ("TIME", "EVENT", "STATE", "CAUSE", "DETAIL")
NODE_COLUMNS = ("TIME", "EVENT", "CAUSE", "DETAIL")
RUN_COLUMNS = ("RUN", "NODES", "STARTED", "ENDED", "HOW IT ENDED")


def table(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; the last one unpadded."""
    cells = [[one_line(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in [list(header), *cells]) for i in range(len(header) - 1)]
    out = []
    for row in [list(header), *cells]:
        padded = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        out.append("  ".join([*padded, row[-1]]).rstrip())
    return out


def _state(value: str) -> str:
    return value.removeprefix("JOB_STATE_") if value and value != "JOB_STATE_UNSPECIFIED" else ""


def _move(event: Json) -> str:
    """``PENDING -> RUNNING``; ``-> PENDING`` for the first; "" when it kept the state."""
    was, now = _state(text(event, "fromState")), _state(text(event, "toState"))
    if was == now:
        return ""
    return f"{was} -> {now}" if was else f"-> {now}"


def _stamp(epoch: float) -> str:
    return format_timestamp(epoch) if epoch > 0 else "-"


def _ending(run: Json) -> str:
    """How a run ended: its reason (the requeue's cause), else its state."""
    reason = text(run, "reason")
    return reason if reason and reason != "None" else job_state(run)


def job_story(runs: list[Json]) -> str:
    """A job's story from QueryAccounting's runs of it (with duplicates and events):
    its earlier runs first, its current record last (which carries every event)."""
    job = runs[-1]
    earlier = runs[:-1]
    events: list[Json] = list(job.get("events") or [])
    name = text(job.get("spec") or {}, "name")
    title = f"Job {num(job, 'jobId')}"
    title += f" ({name})" if name else ""
    title += f" of {text(job, 'user')}" if text(job, "user") else ""
    lines = [f"{title} is {job_state(job)}: {len(events)} event(s), oldest first."]
    if events:
        rows = [
            [
                _stamp(real(e, "time")),
                text(e, "event"),
                _move(e),
                text(e, "cause"),
                text(e, "detail"),
            ]
            for e in events
        ]
        lines += table(JOB_COLUMNS, rows)
    else:
        lines.append("No events kept (its story was not recorded by this ctld).")
    if earlier:
        lines.append("")
        lines.append(f"Earlier runs ({len(earlier)}):")
        rows = [
            [
                str(num(r, "restartCount")),
                text(r, "nodelist") or "-",
                _stamp(real(r, "startTime")),
                _stamp(real(r, "endTime")),
                _ending(r),
            ]
            for r in earlier
        ]
        lines += table(RUN_COLUMNS, rows)
    return "".join(one_line(line) + "\n" for line in lines)


def recent_changes(node: Json, count: int = 5) -> str:
    """``corral why NODE``'s tail: the node's last ``count`` changes, when it has more
    than the last one (which ``corral why`` names already)."""
    changes: list[Json] = list(node.get("history") or [])
    if len(changes) < 2:
        return ""
    shown = changes[-count:]
    lines = [
        f"Recent changes, oldest first ({len(shown)} of {len(changes)} kept: "
        f"corral history {one_line(text(node, 'name'))} shows all):"
    ]
    lines += ["  " + line for line in table(NODE_COLUMNS, _node_rows(shown))]
    return "".join(one_line(line) + "\n" for line in lines)


def _node_rows(changes: list[Json]) -> list[list[str]]:
    return [
        [
            _stamp(real(c, "time")),
            text(c, "event"),
            text(c, "cause"),
            text(c, "detail") or NODE_EVENTS.get(text(c, "event"), ""),
        ]
        for c in changes
    ]


def node_history(node: Json) -> str:
    """A node's recent changes, oldest first (the detail column: the change's detail, or
    what its event means)."""
    changes: list[Json] = list(node.get("history") or [])
    star = "*" if node.get("notResponding") else ""
    head = f"Node {text(node, 'name')} is {node_state(node)}{star}: {len(changes)} change(s)"
    head += ", oldest first"
    if len(changes) >= NODE_HISTORY:
        head += f" (ctld keeps the last {NODE_HISTORY})"
    lines = [head + "."]
    if changes:
        lines += table(NODE_COLUMNS, _node_rows(changes))
    return "".join(one_line(line) + "\n" for line in lines)
