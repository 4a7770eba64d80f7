"""The gRPC side of ctld's services: one handler per RPC of a service, registered from
the generated method table (corral/wire/methods.py), each calling the transport-free
``call(method, request, caller)`` of ctld/api/rpc.py. A body that does not parse answers
INVALID_ARGUMENT; a CorralError leaves as its own status, with its class name in the
trailing metadata; anything else is logged and answered as an internal error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError, Message

from corral.auth.tls import peer_name
from corral.errors import CorralError, InvalidRequest
from corral.rpccodes import abort
from corral.wire import corral_pb2 as pb
from corral.wire.methods import SERVICES
from ctld.api.auth import Caller

log = structlog.get_logger("ctld.api.rpc")


def grpc_caller(context: grpc.aio.ServicerContext[Any, Any], method: str) -> Caller:
    """A gRPC request's sender: its metadata (credentials) and the name in its verified
    certificate, if any; TCP gives no kernel identity."""
    md = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    return Caller(metadata=md, method=method, peer_cert=peer_name(context))


class _Garbled:
    """A request body that did not parse: the handler answers INVALID_ARGUMENT (grpc
    itself would answer UNKNOWN for a deserializer that raises)."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.error = InvalidRequest(f"malformed {type_name}: {error or 'cannot parse'}")


def _parser(req_type: type[Message]) -> Callable[[bytes], Message | _Garbled]:
    def parse(data: bytes) -> Message | _Garbled:
        try:
            return req_type.FromString(data)
        except (DecodeError, ValueError) as exc:
            return _Garbled(req_type.__name__, exc)

    return parse


Call = Callable[[str, Message, Caller], Awaitable[Message]]


def _behavior(name: str, call: Call) -> Callable[..., Awaitable[Message]]:
    async def behavior(
        request: Message | _Garbled, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Message:
        try:
            if isinstance(request, _Garbled):
                raise request.error
            return await call(name, request, grpc_caller(context, name))
        except CorralError as exc:
            await abort(context, exc)
            raise  # unreachable: abort raises
        except Exception:
            log.exception("rpc handler failed", method=name)
            await abort(context, CorralError("internal error in ctld (see its log)"))
            raise

    return behavior


def service_handler(service: str, call: Call) -> grpc.GenericRpcHandler[Any, Any]:
    """gRPC handlers for every method of ``service`` in the generated method table,
    each calling ``call(method, request, metadata)``; a CorralError leaves as its status
    with its class name in the trailing metadata."""
    handlers = {}
    for name, (req_name, resp_name, client_streams, server_streams) in SERVICES[service].items():
        if client_streams or server_streams:
            raise TypeError(f"{service}/{name} streams: register it by hand")
        req_type: type[Message] = getattr(pb, req_name)
        resp_type: type[Message] = getattr(pb, resp_name)
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            _behavior(name, call),
            request_deserializer=_parser(req_type),
            response_serializer=resp_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(service, handlers)
