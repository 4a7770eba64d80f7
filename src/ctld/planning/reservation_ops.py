"""scontrol's reservations: create, update and delete (operators only), and the expired
ones forgotten. Each change is committed (a Change writes its rows), so a restarted ctld
finds them as they were; the records and their checks are ``model/reservations.py``."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.state import State
from ctld.model.authz import Policy
from ctld.storage.store import Op

log = structlog.get_logger("ctld")
#: Queries.free_nodes: the nodes a new reservation may take
FreeNodes = Callable[[int, str, set[str]], list[str]]


class ReservationOps:
    def __init__(self, state: State, policy: Policy, free_nodes: FreeNodes) -> None:
        self.state = state
        self.policy = policy
        self.free_nodes = free_nodes

    async def create(self, who: Identity, spec: pb.Reservation) -> pb.Reservation:
        self.policy.check_admin(who, "creating a reservation")
        resv, op = self.state.reservations.create(who, spec, self.free_nodes)
        await self._commit(op)
        log.info("reservation created", reservation=resv.name, nodes=resv.nodes, user=who.user)
        return resv

    async def update(self, who: Identity, req: pb.UpdateReservationRequest) -> None:
        self.policy.check_admin(who, "updating a reservation")
        await self._commit(self.state.reservations.update(req))

    async def delete(self, who: Identity, name: str) -> None:
        self.policy.check_admin(who, "deleting a reservation")
        await self._commit(self.state.reservations.delete(name))

    def expire(self) -> None:
        """Forget the reservations whose end has passed; their rows go in the background
        (the periodic sweep does not wait on the store)."""
        expired = self.state.reservations.expired()
        if expired is not None:
            self.state.spawn(self._commit(expired))

    async def _commit(self, op: Op) -> None:
        async with Change(self.state) as ch:
            ch.put(op)
