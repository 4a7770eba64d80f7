"""Advance reservations: nodes kept for some users or accounts during a time window.

Operators create, update and delete them (``scontrol create|update|delete
reservation``); the scheduler sees each as whole-node holds that only the jobs naming
it (``--reservation``) may use, and that other jobs may use only if they end before it
starts. Reservations are durable in the store and dropped once they have ended; every
change is also logged with its time (the store's ``reservation_log``), so a replay of
the site's history (``corral sim --from-store``) sees the ones that ended.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from corral import hostlist
from corral.config import ClusterConfig
from corral.errors import CorralError, ReservationInvalid
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.sched import ReservationView
from ctld.storage.store import Op

KNOWN_FLAGS = frozenset(
    {"MAINT", "IGNORE_JOBS", "OVERLAP", "DAILY", "WEEKLY", "FLEX", "MAGNETIC", "ANY_NODES"}
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_WINDOW_S = 10 * 365 * 86400


class Reservations:
    def __init__(self, config: ClusterConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock
        self.by_name: dict[str, pb.Reservation] = {}
        self._counter = 0

    def load(self, stored: Iterable[pb.Reservation]) -> None:
        for resv in stored:
            self.by_name[resv.name] = resv

    def views(self) -> tuple[ReservationView, ...]:
        return tuple(
            ReservationView(
                name=r.name,
                start=r.start_time,
                end=r.end_time,
                nodes=tuple(hostlist.expand(r.nodes)) if r.nodes else (),
                users=tuple(r.users),
                accounts=tuple(r.accounts),
                flags=tuple(r.flags),
            )
            for r in self.by_name.values()
        )

    def check_job_access(self, name: str, user: str, account: str) -> None:
        """At submit: the reservation exists and lets this user (or account) in."""
        resv = self.by_name.get(name)
        if resv is None or resv.end_time <= self.clock():
            raise ReservationInvalid()
        if user in resv.users or (account and account in resv.accounts):
            return
        raise ReservationInvalid("Access denied to requested reservation")

    # ------------------------------------------------------------ operator changes

    def create(
        self,
        who: Identity,
        spec: pb.Reservation,
        pick_nodes: Callable[[int, str, set[str]], list[str]],
    ) -> tuple[pb.Reservation, Op]:
        resv = pb.Reservation()
        resv.CopyFrom(spec)
        if not resv.name:
            self._counter += 1
            resv.name = f"{(resv.users or [who.user])[0]}_{self._counter}"
            while resv.name in self.by_name:
                self._counter += 1
                resv.name = f"{(resv.users or [who.user])[0]}_{self._counter}"
        if not NAME.fullmatch(resv.name):
            raise ReservationInvalid(f"Invalid reservation name: {resv.name!r}")
        if resv.name in self.by_name:
            raise ReservationInvalid(f"Reservation {resv.name} already exists")
        now = self.clock()
        resv.start_time = resv.start_time or now
        self._set_window(resv, end=spec.end_time, duration=spec.duration_s)
        if not resv.users and not resv.accounts:
            raise ReservationInvalid("A reservation needs Users= or Accounts=")
        if resv.nodes:
            self._check_nodes(resv.nodes)
        elif resv.node_count:
            busy = {
                n
                for other in self.by_name.values()
                if other.start_time < resv.end_time and resv.start_time < other.end_time
                for n in hostlist.expand(other.nodes)
            }
            resv.nodes = hostlist.compress(pick_nodes(resv.node_count, resv.partition, busy))
        else:
            raise ReservationInvalid("A reservation needs Nodes= or NodeCnt=")
        resv.node_count = len(hostlist.expand(resv.nodes))
        self._check_flags(resv.flags)
        self._check_overlap(resv)
        resv.created_by = who.user
        self.by_name[resv.name] = resv
        return resv, Op(reservations_put=[resv], reservations_at=self.clock())

    def update(self, req: pb.UpdateReservationRequest) -> Op:
        current = self._get(req.name)
        resv = pb.Reservation()
        resv.CopyFrom(current)
        if req.HasField("start_time"):
            resv.start_time = req.start_time
        end = req.end_time if req.HasField("end_time") else 0.0
        duration = req.duration_s if req.HasField("duration_s") else 0
        if not end and not duration:
            end = current.end_time if not req.HasField("start_time") else 0
            duration = 0 if end else int(current.end_time - current.start_time)
        self._set_window(resv, end=end, duration=duration)
        if req.HasField("nodes"):
            self._check_nodes(req.nodes)
            resv.nodes = req.nodes
            resv.node_count = len(hostlist.expand(req.nodes))
        if req.users:
            resv.users[:] = list(req.users)
        if req.accounts:
            resv.accounts[:] = list(req.accounts)
        if req.flags:
            self._check_flags(req.flags)
            resv.flags[:] = list(req.flags)
        self._check_overlap(resv)
        self.by_name[resv.name] = resv
        return Op(reservations_put=[resv], reservations_at=self.clock())

    def delete(self, name: str) -> Op:
        self._get(name)
        del self.by_name[name]
        return Op(reservations_delete=[name], reservations_at=self.clock())

    def expired(self) -> Op | None:
        now = self.clock()
        gone = [n for n, r in self.by_name.items() if r.end_time <= now]
        for name in gone:
            del self.by_name[name]
        return Op(reservations_delete=gone, reservations_at=now) if gone else None

    # ------------------------------------------------------------ checks

    def _get(self, name: str) -> pb.Reservation:
        resv = self.by_name.get(name)
        if resv is None:
            raise ReservationInvalid(f"Reservation {name} not found")
        return resv

    @staticmethod
    def _set_window(resv: pb.Reservation, *, end: float, duration: int) -> None:
        if end and duration:
            raise ReservationInvalid("Give EndTime= or Duration=, not both")
        if duration:
            if duration < 0:
                raise ReservationInvalid("Duration must be positive (or UNLIMITED)")
            end = resv.start_time + duration
        if not end:
            raise ReservationInvalid("A reservation needs EndTime= or Duration=")
        if end <= resv.start_time or end - resv.start_time > MAX_WINDOW_S:
            raise ReservationInvalid("Reservation request has invalid time window")
        resv.end_time = end
        resv.duration_s = int(end - resv.start_time)

    def _check_nodes(self, expr: str) -> None:
        try:
            names = hostlist.expand(expr)
        except CorralError as exc:
            raise ReservationInvalid(f"Invalid node list {expr!r}: {exc}") from None
        known = set(self.config.node_names)
        for name in names:
            if name not in known:
                raise ReservationInvalid(f"Invalid node name specified: {name}")

    @staticmethod
    def _check_flags(flags: Iterable[str]) -> None:
        for flag in flags:
            if flag not in KNOWN_FLAGS:
                raise ReservationInvalid(f"Invalid reservation flag: {flag}")

    def _check_overlap(self, resv: pb.Reservation) -> None:
        if "OVERLAP" in resv.flags or "MAINT" in resv.flags:
            return
        mine = set(hostlist.expand(resv.nodes))
        for other in self.by_name.values():
            if other.name == resv.name or "OVERLAP" in other.flags:
                continue
            if other.start_time < resv.end_time and resv.start_time < other.end_time:
                shared = mine & set(hostlist.expand(other.nodes))
                if shared:
                    raise ReservationInvalid(
                        f"Requested nodes are busy: {sorted(shared)[0]} is in reservation "
                        f"{other.name} at that time"
                    )
