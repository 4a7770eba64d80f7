"""gRPC status codes: how the daemons' retry loops read them, and how a CorralError
leaves a servicer (ctld's and noded's alike, ``abort``: its class's status, its name in
the trailing metadata, so the caller rebuilds the same class with ``sent_error`` or
corral/api.py; corral/errors.py). ``answers_errors`` wraps noded's NodeAgent methods."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from grpc import aio

from corral.errors import ERROR_METADATA_KEY, CorralError, from_wire

# a call that failed so was lost in transit or in an overloaded peer: try it again as it
# was; any other code is the peer's answer (refused, unknown), and retrying alone won't fix it
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
    }
)


def status_of(exc: CorralError) -> grpc.StatusCode:
    """The gRPC status ``exc`` travels as (its class's ``grpc_code``)."""
    code: grpc.StatusCode = getattr(grpc.StatusCode, exc.grpc_code)
    return code


async def abort(context: aio.ServicerContext[Any, Any], exc: CorralError) -> None:
    """End the call with ``exc``: its status and message, its class name in the trailing
    metadata (raises, as ``context.abort`` does)."""
    context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
    await context.abort(status_of(exc), exc.message)


Servicer = TypeVar("Servicer")
Reply = TypeVar("Reply")
Method = Callable[[Servicer, Any, aio.ServicerContext[Any, Any]], Awaitable[Reply]]


def answers_errors(daemon: str) -> Callable[[Method[Servicer, Reply]], Method[Servicer, Reply]]:
    """A servicer method (noded's NodeAgent) whose CorralError leaves through ``abort``,
    as ctld's handlers' do (ctld/api/grpc_service.py); anything else is a bug of
    ``daemon``'s, logged and answered as an internal error."""
    log = structlog.get_logger(daemon)

    def decorate(method: Method[Servicer, Reply]) -> Method[Servicer, Reply]:
        @functools.wraps(method)
        async def answering(
            self: Servicer, request: Any, context: aio.ServicerContext[Any, Any]
        ) -> Reply:
            try:
                return await method(self, request, context)
            except CorralError as exc:
                await abort(context, exc)
                raise  # unreachable: abort raises
            except Exception:
                log.exception("call failed", call=method.__name__)
                await abort(context, CorralError(f"internal error in {daemon} (see its log)"))
                raise

        return answering

    return decorate


def sent_error(exc: grpc.RpcError, message: str) -> CorralError | None:
    """The CorralError a peer's servicer ended the call with, rebuilt with ``message``;
    None when the peer named none (the call failed on its way, or an older peer)."""
    trailing = getattr(exc, "trailing_metadata", None)
    for key, value in (trailing() if callable(trailing) else None) or ():
        if key == ERROR_METADATA_KEY and isinstance(value, str):
            return from_wire(value, message)
    return None
