"""Advance reservations in a blocked job's way: Slurm's ReqNodeNotAvail reasons for it.

A job that cannot start now, and whose every candidate partition keeps too few of its
nodes (or not a node it requires, -w) outside other advance reservations over its time
limit from now (from its own reservation's start, if it names one), waits for those
reservations, not for resources, however busy the nodes are, and whatever jobs are
ahead of it. Slurm 22.05 says so before Resources or Priority (checked against the
real Slurm on this machine):

- ``ReqNodeNotAvail, Reserved for maintenance`` when a MAINT reservation is among them,
  begun or to come;
- else ``ReqNodeNotAvail, UnavailableNodes:NODES`` when nodes of its partitions are
  down or drained (NODES: those, of its -w nodes if it names some, less its -x), or
  ``ReqNodeNotAvail, May be reserved for other job`` when none is.

A job waiting for its own reservation to begin has the reason ``Reservation``
(``backfill.py``).
"""

from __future__ import annotations

from corral.reasons import UNAVAILABLE_NODES, Reason
from ctld.sched.ask import Ask
from ctld.sched.availability import Availability
from ctld.sched.model import JobRequest, Snapshot

RESERVED_FOR_MAINTENANCE = Reason.RESERVED_FOR_MAINTENANCE
MAY_BE_RESERVED = Reason.MAY_BE_RESERVED


class Reserved:
    """Whether a blocked job waits for advance reservations, and Slurm's words for it."""

    def __init__(self, snap: Snapshot, avail: Availability) -> None:
        self.now = snap.now
        self.reservations = tuple(r for r in snap.reservations if r.end > snap.now)
        self.views, self.position = avail.views, avail.index.position

    def reason(self, req: JobRequest, ask: Ask) -> str:
        """The reason ``req`` waits for reservations ("" if some candidate keeps room
        for it outside them: it waits for resources, or its turn)."""
        if not self.reservations:
            return ""
        maint = False
        for cand in ask.candidates:
            start = max(self.now, cand.not_before)
            end = start + ask.duration
            taken: set[str] = set()
            for resv in self.reservations:
                if cand.ignore == f"resv:{resv.name}" or resv.end <= start or resv.start >= end:
                    continue
                hit = cand.members.intersection(resv.nodes)
                if hit:
                    taken |= hit
                    maint = maint or "MAINT" in resv.flags
            if len(cand.members) - len(taken) >= ask.shape.nodes and not cand.required & taken:
                return ""
        if maint:
            return RESERVED_FOR_MAINTENANCE
        down = self.unavailable(req, ask)
        return UNAVAILABLE_NODES + ",".join(down) if down else MAY_BE_RESERVED

    def unavailable(self, req: JobRequest, ask: Ask) -> list[str]:
        """The down or drained nodes of its partitions (of its -w ones, less its -x)."""
        wanted = set(req.nodelist)
        excluded = set(req.exclude)
        out: dict[str, None] = {}
        for cand in ask.candidates:
            for name in cand.partition.nodes:
                i = self.position.get(name)
                if (
                    i is None
                    or self.views[i].schedulable
                    or name in excluded
                    or (wanted and name not in wanted)
                ):
                    continue
                out[name] = None
        return list(out)
