"""How many silent nodes make ctld take the silence for its own problem (and declare
none DOWN): one rule for ctld and for the nodes that weigh fencing against it
(ctld/fleet/liveness.py, noded/witness.py; docs/reliability.md)."""

from __future__ import annotations

import math


def hold_needed(fraction: float, nodes: int) -> int:
    """The number of silent nodes, out of ``nodes``, at which ctld holds (at least 1)."""
    return max(1, math.ceil(fraction * nodes - 1e-9))
