"""What a standby ctld answers: every Controller and NodeController call is refused
with NotPrimary (UNAVAILABLE, HTTP 503), naming the primary it knows of, so commands,
srun and nodes move on to the next controller of ``controller.hosts``, as Slurm's
commands do when its backup answers that it is in standby mode.

A standby keeps no state: it learns everything from the store when it takes over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from aiohttp import web
from google.protobuf.message import Message

from corral.errors import NotPrimary
from corral.wire.methods import CONTROLLER, NODE_CONTROLLER
from ctld.auth import Caller
from ctld.lease import Holder
from ctld.rpc import service_handler


def refusal(me: str, holder: Holder) -> str:
    """Why a standby refuses, and where the primary is (as far as it knows)."""
    if holder.live and holder.holder != me:
        return (
            f"{me} is a backup controller in standby mode; the primary is {holder.holder} "
            f"(lease token {holder.token})"
        )
    return f"{me} is a backup controller in standby mode; no primary holds the lease now"


def grpc_handlers(message: Callable[[], str]) -> tuple[grpc.GenericRpcHandler[Any, Any], ...]:
    async def call(method: str, request: Message, caller: Caller) -> Message:
        raise NotPrimary(message())

    return (service_handler(CONTROLLER, call), service_handler(NODE_CONTROLLER, call))


def http_app(message: Callable[[], str]) -> web.Application:
    """The gateway's routes, each answering as the gateway answers a NotPrimary."""

    async def handle(request: web.Request) -> web.Response:
        body = {"error": NotPrimary.__name__, "code": NotPrimary.grpc_code, "message": message()}
        return web.json_response(body, status=NotPrimary.http_status)

    app = web.Application()
    app.router.add_post("/corral.v1.Controller/{method}", handle)
    return app
