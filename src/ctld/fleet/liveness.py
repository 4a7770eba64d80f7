"""Whether ctld may declare silent nodes DOWN now: not while most of them are silent.

When ctld stops hearing a large share of the nodes at once (``heartbeat.hold_fraction``
of those it expects to hear: powered on and not DOWN), the likelier cause is its own:
it was restarted, its host or link failed, the nodes' network to it is down. It then
declares no node DOWN (Kubernetes' node lifecycle controller stops evicting in a zone
so), and once it hears most of them again it times every silent node afresh from that
moment, a full ``heartbeat.timeout_s``. The nodes weigh the same rule before fencing
(noded/witness.py): each answer to a node says how many silent nodes make ctld hold
(``hold_needed``); ctld holds at the smallest number any node may still believe (a
node cut off before it heard a larger one keeps the number it had), so a node never
keeps its jobs while ctld gives them to others. A node counts as silent when its
beats stop, or when they say it has not heard ctld (``HeartbeatRequest.deaf_s``, so a
node whose answers are lost is silent to both). docs/reliability.md has the argument.
"""

from __future__ import annotations

import structlog

from corral.quorum import hold_needed
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model.nodes import POWER_ON, NodeRecord

log = structlog.get_logger("ctld")

SILENT_INTERVALS = 2.0  # beats missed (or not heard) before a node counts as silent


class Verdicts:
    """ctld's side of the rule: whether it holds now, and since when it hears most."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.holding = False
        self.regained = 0.0  # when ctld last heard most nodes again after a hold
        self.told: dict[str, int] = {}  # the hold_needed each node was last told
        # the peers each node was told (registration, heartbeats): told again on a change
        self.peers_rev = 0
        self.peers_told: dict[str, int] = {}

    def peers_changed(self) -> None:
        """A node registered (it is there, at its address): every node's peers change."""
        self.peers_rev += 1

    def peers_of(self, name: str) -> list[pb.NodePeer]:
        """The other nodes a node asks before it fences (noded/witness.py)."""
        self.peers_told[name] = self.peers_rev
        return [
            pb.NodePeer(name=n.name, agent_address=n.agent_address or n.address)
            for n in self.state.nodes.values()
            if n.name != name and n.registered and (n.agent_address or n.address)
        ]

    def new_peers_of(self, name: str) -> list[pb.NodePeer]:
        """A node's peers if they changed since it was last told (else none)."""
        if self.peers_told.get(name) == self.peers_rev:
            return []
        return self.peers_of(name)

    def _expected(self) -> list[NodeRecord]:
        return [n for n in self.state.nodes.values() if not n.down and n.power == POWER_ON]

    def needed_now(self) -> int:
        """hold_needed for the nodes as they stand now (what a node is told)."""
        fraction = self.state.config.heartbeat.hold_fraction
        return hold_needed(fraction, len(self._expected())) if fraction > 0 else 0

    def tell(self, node: str) -> int:
        """What to tell ``node`` now (it may hold at this number from now on)."""
        needed = self.needed_now()
        if needed:
            self.told[node] = needed
        return needed

    def forget(self, node: str) -> None:
        """A node that is DOWN or powered off holds no job: its number no longer binds."""
        self.told.pop(node, None)

    def silent(self, node: NodeRecord, now: float) -> bool:
        hb = self.state.config.heartbeat
        after = SILENT_INTERVALS * hb.interval_s
        last = max(node.last_heartbeat, self.state.start_time)
        return now - last > after or node.heard_deaf_s > after

    def check(self, now: float) -> float:
        """Whether ctld holds now (``holding``), and the time silent nodes are timed
        from at the latest: ctld's start, or when it last heard most nodes again."""
        if self.state.config.heartbeat.hold_fraction <= 0:
            return self.state.start_time
        expected = self._expected()
        needed = min([self.needed_now(), *self.told.values()])
        silent = sum(1 for n in expected if self.silent(n, now))
        holding = bool(expected) and silent >= needed
        if holding and not self.holding:
            log.warning(
                "most nodes silent at once: no node is declared DOWN until ctld hears "
                "them again (ctld's own outage or network, not theirs)",
                silent=silent,
                nodes=len(expected),
                needed=needed,
            )
        elif self.holding and not holding:
            self.regained = now
            log.info(
                "most nodes heard again: silent nodes are timed afresh",
                silent=silent,
                nodes=len(expected),
            )
        self.holding = holding
        return max(self.state.start_time, self.regained)
