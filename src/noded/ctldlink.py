"""noded's connection to ctld: a gRPC channel per controller of the list (a standby's
too), the one it talks to now, the move to the next, and a fresh connection when its
peers hear ctld and this node does not."""

from __future__ import annotations

import asyncio

from grpc import aio

from corral.auth import CONTROLLER_CN, tls
from corral.limits import GRPC_RECONNECT_OPTIONS
from corral.wire import corral_pb2_grpc as pbg


class CtldLink:
    def __init__(self, addresses: list[str], name: str, tls_dir: str, call_timeout_s: float):
        self.addresses = addresses
        self.name = name
        self.tls_dir = tls_dir
        self.call_timeout_s = call_timeout_s
        self.channels = [self._connect(target) for target in addresses]
        self.stubs = [pbg.NodeControllerStub(c) for c in self.channels]
        self.current = 0  # the controller the link talks to
        self._closing: set[asyncio.Task[None]] = set()

    def _connect(self, target: str) -> aio.Channel:
        # a channel of its own connections: gRPC shares one connection among the channels
        # to a target by default, so a new channel would reuse the stuck one
        options = [*GRPC_RECONNECT_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
        if self.tls_dir:  # this node's certificate proves which node calls; every
            # controller shows the one controller certificate
            return aio.secure_channel(
                target,
                tls.channel_credentials(self.tls_dir, self.name),
                options=[*tls.channel_options(CONTROLLER_CN), *options],
            )
        return aio.insecure_channel(target, options=options)

    @property
    def stub(self) -> pbg.NodeControllerAsyncStub:
        return self.stubs[self.current]

    @property
    def address(self) -> str:
        return self.addresses[self.current]

    def move_on(self) -> bool:
        """The next controller of the list; True once a whole round has failed."""
        self.current = (self.current + 1) % len(self.stubs)
        return self.current == 0

    def reconnect(self) -> None:
        """A new connection to the current controller for the calls from now on. A long
        cut can leave the old one stuck (TCP retransmitting with a backoff of seconds),
        and a call on it waits out its whole deadline after the link is back. The old
        channel is closed once its calls' deadlines are over: closing it at once would
        cancel them, and a cancelled call raises CancelledError in the loop awaiting it."""
        old = self.channels[self.current]
        self.channels[self.current] = self._connect(self.addresses[self.current])
        self.stubs[self.current] = pbg.NodeControllerStub(self.channels[self.current])
        closing = asyncio.get_running_loop().create_task(old.close(self.call_timeout_s + 1))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for task in list(self._closing):
            task.cancel()
        for channel in self.channels:
            await channel.close(None)
