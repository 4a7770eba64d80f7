"""Whether a node cut off from ctld may keep its jobs: it asks its peers.

A node that has not heard ctld for ``heartbeat.timeout_s - interval_s`` used to kill
its jobs (self-fencing), so that ctld, declaring it DOWN at the timeout, could requeue
them without a second copy running. That also killed every job of the cluster when
ctld itself was away (restarted, upgraded, its host rebooting, cut off): every node is
silent then. The two cases differ in what the other nodes see, and ctld decides by
the same evidence:

- ctld declares silent nodes DOWN only while fewer than ``heartbeat.hold_fraction``
  of the nodes it expects to hear are silent (ctld/fleet/liveness.py; Kubernetes' node
  lifecycle controller does the same for a zone); it tells each node how many that
  is (``hold_needed``) in every answer. A node counts as silent to ctld when its
  beats stop or when they say it has not heard ctld (``HeartbeatRequest.deaf_s``).
- A node past its fence time asks every peer (``Witness``) how long since it heard
  ctld. With itself, ``hold_needed`` nodes not hearing ctld is
  the situation in which ctld declares nobody DOWN: it keeps its jobs and says
  so in ``<spool>/hold``, which the fence guard reads. Fewer (its peers hear ctld, or
  it reaches too few of them): ctld is alive and will give it up: it fences as before.
- When ctld hears most nodes again, it times every silent node afresh from that moment
  (a full ``timeout_s``); a node still cut off sees its peers hear ctld again at its
  next round and fences well within that.

What the peers and the cluster's size are comes with the registration, and is kept in
the spool (``peers.json``) for a noded restarted while ctld is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass, field

import grpc
import structlog
from grpc import aio

from corral.auth import tls
from corral.limits import GRPC_RECONNECT_OPTIONS
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from noded.guard import HOLD_FILE

log = structlog.get_logger("noded")

PEERS_FILE = "peers.json"
ASK_TIMEOUT_S = 2.0  # one round of questions, all peers at once


@dataclass
class Quorum:
    """What ctld said of the cluster: the peers (at registration) and how many nodes
    not hearing it (this one included) make it hold (at each answer; 0: an older ctld
    that gives none: no hold, fence as before)."""

    peers: list[tuple[str, str]] = field(default_factory=list)  # (name, agent address)
    needed: int = 0


class Witness:
    def __init__(self, spool: str, name: str, interval_s: float, tls_dir: str = "") -> None:
        self.spool = spool
        self.name = name
        self.interval_s = interval_s
        self.tls_dir = tls_dir
        self.quorum = _load(os.path.join(spool, PEERS_FILE))
        self.holding = False  # the last round found a quorum not hearing ctld
        self._channels: dict[str, aio.Channel] = {}

    # ------------------------------------------------------------ from ctld

    def learn(self, reply: pb.RegisterNodeResponse) -> None:
        """The peers a registration tells, and its hold_needed."""
        peers = [(p.name, p.agent_address) for p in reply.peers if p.name != self.name]
        self._keep(Quorum(peers, reply.hold_needed))

    def heard(self, reply: pb.HeartbeatResponse) -> None:
        """A heartbeat's answer: ctld's hold_needed now, and the peers if they changed."""
        peers = [(p.name, p.agent_address) for p in reply.peers if p.name != self.name]
        self._keep(Quorum(peers or self.quorum.peers, reply.hold_needed))

    def _keep(self, quorum: Quorum) -> None:
        """Kept in the spool too: a noded restarted while ctld is away still knows."""
        if quorum == self.quorum:
            return
        self.quorum = quorum
        path = os.path.join(self.spool, PEERS_FILE)
        data = {"peers": quorum.peers, "needed": quorum.needed}
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            fd = os.open(path + ".tmp", flags, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("peers not saved in the spool", error=str(exc))

    # ------------------------------------------------------------ the question

    async def ctld_lost_by_quorum(self) -> bool:
        """Ask every peer now: True if enough of the cluster (this node too) does not
        hear ctld that ctld holds its verdicts (then this node keeps its jobs)."""
        q = self.quorum
        if q.needed <= 0:
            return False
        needed = q.needed
        deaf_for = 2 * self.interval_s  # a peer silent this long counts (as ctld counts it)
        answers = await asyncio.gather(*(self._ask(n, a) for n, a in q.peers))
        not_hearing = 1 + sum(1 for a in answers if a is not None and a.deaf_s >= deaf_for)
        holding = not_hearing >= needed
        if holding != self.holding:
            self.holding = holding
            if holding:
                log.warning(
                    "ctld unreachable from most of the cluster: jobs kept running",
                    node=self.name,
                    not_hearing=not_hearing,
                    needed=needed,
                )
            else:
                log.error(
                    "ctld is reachable from the rest of the cluster: this node is cut off",
                    node=self.name,
                    not_hearing=not_hearing,
                    needed=needed,
                )
        if holding:
            self._touch_hold()
        return holding

    async def _ask(self, name: str, address: str) -> pb.WitnessResponse | None:
        if not address:
            return None
        channel = self._channels.get(address)
        if channel is None:
            if self.tls_dir:
                channel = aio.secure_channel(
                    address,
                    tls.channel_credentials(self.tls_dir, self.name),
                    options=[*tls.channel_options(name), *GRPC_RECONNECT_OPTIONS],
                )
            else:
                channel = aio.insecure_channel(address, options=GRPC_RECONNECT_OPTIONS)
            self._channels[address] = channel
        try:
            reply: pb.WitnessResponse = await pbg.NodeAgentStub(channel).Witness(
                pb.WitnessRequest(node=self.name), timeout=min(ASK_TIMEOUT_S, self.interval_s)
            )
        except grpc.RpcError:
            return None  # unreachable, or no witness there: it confirms nothing
        if reply.node and reply.node != name:
            return None  # another node answers at that address: not a witness of this
        return reply if reply.registered else None

    def _touch_hold(self) -> None:
        path = os.path.join(self.spool, HOLD_FILE)
        try:
            with open(path, "a"):
                os.utime(path)
        except OSError as exc:
            log.warning("hold file not touched", path=path, error=str(exc))

    def release(self) -> None:
        """ctld heard again: no hold any more."""
        if self.holding:
            log.info("ctld heard again", node=self.name)
        self.holding = False
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.spool, HOLD_FILE))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)


def answer(name: str, deaf_s: float, registered: bool) -> pb.WitnessResponse:
    """This node's answer to a peer: how long since it heard ctld (``deaf_s``, on the
    link's clock)."""
    return pb.WitnessResponse(node=name, deaf_s=deaf_s, registered=registered)


def _load(path: str) -> Quorum:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            raw = json.load(fh)
        peers = [(str(n), str(a)) for n, a in raw.get("peers", [])]
        return Quorum(peers, int(raw.get("needed", 0)))
    except (OSError, ValueError, TypeError, AttributeError):
        return Quorum()
