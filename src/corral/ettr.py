"""Effective training time: a job's interruptions and what they cost (docs/reliability.md).

Pure arithmetic on plain numbers, shared by ctld (``corral why``, the interruption
records it writes at a requeue) and the commands (sacct's fields, ``corral report
--ettr``), which read jobs as JSON. Every second from the first start to the end is
one of three kinds:

- lost: work done after the last checkpoint of a run that was interrupted (from that
  mark, or the run's start when none was seen, to the interruption);
- restart overhead: from an interruption to the start of the next run (the queue wait
  and the launch);
- useful: the rest.

ETTR = useful / wall, wall = end (or now) - first start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # sacct imports this: no dataclasses or typing at its start-up
if TYPE_CHECKING:
    from collections.abc import Iterable

CAUSES = ("node_fail", "hang", "preemption", "drain", "maintenance", "grow", "operator")


class Interrupted:
    """One interruption as the arithmetic needs it."""

    __slots__ = ("lost_s", "next_start", "time")

    def __init__(self, time: float, lost_s: float, next_start: float) -> None:
        self.time = time
        self.lost_s = lost_s
        self.next_start = next_start  # 0: the next run has not started


class Ettr:
    __slots__ = ("interruptions", "lost_s", "overhead_s", "wall_s")

    def __init__(self, wall_s: float, lost_s: float, overhead_s: float, interruptions: int) -> None:
        self.wall_s = wall_s
        self.lost_s = lost_s
        self.overhead_s = overhead_s
        self.interruptions = interruptions

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ettr):
            return NotImplemented
        mine = (self.wall_s, self.lost_s, self.overhead_s, self.interruptions)
        return mine == (other.wall_s, other.lost_s, other.overhead_s, other.interruptions)

    def __hash__(self) -> int:
        return hash((self.wall_s, self.lost_s, self.overhead_s, self.interruptions))

    def __repr__(self) -> str:
        return (
            f"Ettr(wall_s={self.wall_s}, lost_s={self.lost_s}, "
            f"overhead_s={self.overhead_s}, interruptions={self.interruptions})"
        )

    @property
    def useful_s(self) -> float:
        return max(0.0, self.wall_s - self.lost_s - self.overhead_s)

    @property
    def ratio(self) -> float | None:
        """useful / wall; None before the first start."""
        return self.useful_s / self.wall_s if self.wall_s > 0 else None


def lost_work(run_start: float, checkpoint_time: float, ended: float) -> float:
    """Work a run interrupted at ``ended`` loses: since its last checkpoint mark in the
    run (an older mark, from an earlier run, does not count), else since its start."""
    since = checkpoint_time if run_start <= checkpoint_time <= ended else run_start
    return max(0.0, ended - since)


def ettr(first_start: float, end: float, interruptions: Iterable[Interrupted], now: float) -> Ettr:
    """The figures of a job that first started at ``first_start`` (0: never) and ended at
    ``end`` (0: not yet, counted to ``now``)."""
    items = list(interruptions)
    if first_start <= 0:
        return Ettr(0.0, 0.0, 0.0, len(items))
    stop = end if end > 0 else now
    lost = sum(i.lost_s for i in items)
    # an interruption whose next run has not started costs its wait so far
    overhead = sum(max(0.0, (i.next_start or stop) - i.time) for i in items)
    return Ettr(max(0.0, stop - first_start), lost, overhead, len(items))


def cause_of(detail: str, *, preempted: bool = False, disruption: str = "") -> str:
    """The cause an interruption is filed under (``CAUSES``)."""
    if preempted:
        return "preemption"
    if disruption:
        first = disruption.split(" ", 1)[0]
        return first if first in ("maintenance", "grow") else "drain"
    if "stalled" in detail:
        return "hang"
    return "node_fail"
