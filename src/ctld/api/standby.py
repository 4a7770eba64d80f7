"""The role switch between ctld's listeners and its handlers.

ctld listens once, for its whole life; its gRPC services and HTTP gateway call through
a ``Switch``. While this ctld is primary the switch hands each call to the primary's
ControllerApi and NodeControllerApi; otherwise (a standby, one still loading, one
deposed) every Controller and NodeController call is refused with NotPrimary
(UNAVAILABLE, HTTP 503) naming the primary it knows of, so commands, srun and nodes move
on to the next controller of ``controller.hosts``, as Slurm's commands do when its
backup answers that it is in standby mode. Listening once matters: closing a standby's
listener to open the primary's would reset connections waiting in its accept queue,
and a client cannot tell such a reset from a primary that died after doing its request.

A standby keeps no state: it learns everything from the store when it takes over.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from corral.errors import NotPrimary
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from corral.wire.methods import CONTROLLER, SERVICES
from ctld.api.auth import Caller
from ctld.api.rpc import ControllerApi, NodeControllerApi
from ctld.storage.lease import Holder


def refusal(me: str, holder: Holder) -> str:
    """Why a standby refuses, and where the primary is (as far as it knows)."""
    if holder.live and holder.holder != me:
        return (
            f"{me} is a backup controller in standby mode; the primary is {holder.holder} "
            f"(lease token {holder.token})"
        )
    return f"{me} is a backup controller in standby mode; no primary holds the lease now"


class Switch:
    """What the listeners call: the primary's handlers, or a standby's refusal."""

    def __init__(self, refusal: Callable[[], str]) -> None:
        self.refusal = refusal
        self.api: ControllerApi | None = None
        self.nodes: NodeControllerApi | None = None
        # the web page's one-time logins (ctld/web), handed to each primary's API
        self.web_login: Callable[[Identity], pb.CreateWebLoginResponse] | None = None
        # the request type of each Controller method (the gateway parses with them)
        self.methods: dict[str, tuple[type[Message], None]] = {
            name: (getattr(pb, req), None) for name, (req, *_rest) in SERVICES[CONTROLLER].items()
        }

    def serve(self, api: ControllerApi | None, nodes: NodeControllerApi | None) -> None:
        """Hand calls to ``api`` and ``nodes`` (None: refuse them, as a standby)."""
        self.api, self.nodes = api, nodes

    def _api(self) -> ControllerApi:
        if self.api is None:
            raise NotPrimary(self.refusal())
        return self.api

    async def call(self, method: str, request: Message, caller: Caller) -> Message:
        return await self._api().call(method, request, caller)

    def identify(self, caller: Caller) -> Identity:
        return self._api().identify(caller)

    async def call_json(self, method: str, request: Message, who: Identity) -> bytes:
        return await self._api().call_json(method, request, who)

    async def call_nodes(self, method: str, request: Message, caller: Caller) -> Message:
        if self.nodes is None:
            raise NotPrimary(self.refusal())
        return await self.nodes.call(method, request, caller)
