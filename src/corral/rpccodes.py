"""gRPC status codes as the daemons' retry loops read them."""

from __future__ import annotations

import grpc

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
