"""Places for connections whose sender is not known yet, counted per peer.

ctld's HTTP gateway (before a request on the connection authenticates) and noded's
task stream (before START is proven) take such connections from anyone who can reach
the port. Each holds a place from accept until it is proven or closed: a peer gets at
most ``per_peer`` places, everyone together ``total``, and a connection beyond either
is turned away at once, before anything it sends is read. The whole of 127.0.0.0/8
(and ::1) is one peer: a local user may bind any loopback address as her source, so
counting those apart would give her sixteen million.
"""

from __future__ import annotations

import ipaddress
from typing import Any

LOOPBACK = "loopback"
LOCAL = "local"  # a Unix socket: the kernel names the peer's user, not its address
LOG_EVERY_S = 10.0


def peer_key(peername: Any) -> str:
    """The peer a connection counts against: its address (IPv4 inside IPv6 as IPv4)."""
    if not isinstance(peername, tuple) or not peername:
        return LOCAL
    host = str(peername[0]).split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return LOOPBACK if ip.is_loopback else str(ip)


class Places:
    """How many unproven connections each peer holds, within ``per_peer`` and ``total``."""

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer = per_peer
        self.total = total
        self.held: dict[str, int] = {}
        self.count = 0
        self.refused = 0
        self._logged: dict[str, float] = {}

    def take(self, key: str) -> str:
        """Take a place for ``key``: "" when given, else why not."""
        have = self.held.get(key, 0)
        if have >= self.per_peer:
            return f"too many unproven connections from {key} ({have}; at most {self.per_peer})"
        if self.count >= self.total:
            return f"too many unproven connections ({self.count}; at most {self.total})"
        self.held[key] = have + 1
        self.count += 1
        return ""

    def turned_away(self, key: str, now: float) -> bool:
        """Count a connection refused for ``key``; True when it is time to log one (once
        per peer every ``LOG_EVERY_S``, however many a flood brings)."""
        self.refused += 1
        if now - self._logged.get(key, -LOG_EVERY_S) < LOG_EVERY_S:
            return False
        if len(self._logged) > 4 * self.total:  # many peers: forget the old ones
            self._logged.clear()
        self._logged[key] = now
        return True

    def give_back(self, key: str) -> None:
        have = self.held.get(key, 0)
        if have <= 1:
            self.held.pop(key, None)
        else:
            self.held[key] = have - 1
        self.count = max(0, self.count - 1)
