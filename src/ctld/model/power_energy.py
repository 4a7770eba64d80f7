"""What power saving saved: per node and per partition, the time powered down since ctld
started and the energy that is at ``[power] idle_watts`` less ``powered_down_watts``
(what an idle node would have drawn, less what a powered-down one still draws). Read by
GetNodes (``corral report --power``) and the metrics; counted from the node state
machine's power events (``NodeRecord.powered_down_for``)."""

from __future__ import annotations

from collections.abc import Iterable

from corral.config.power import PowerConfig
from ctld.model.nodes import NodeRecord


def node_figures(node: NodeRecord, power: PowerConfig, now: float) -> tuple[float, float]:
    """(seconds powered down, joules saved) of ``node`` up to ``now``."""
    seconds = node.powered_down_for(now)
    return seconds, seconds * max(0.0, power.idle_watts - power.powered_down_watts)


def by_partition(
    nodes: Iterable[NodeRecord], power: PowerConfig, now: float
) -> dict[str, tuple[float, float]]:
    """partition -> (seconds powered down, joules saved) over its nodes."""
    out: dict[str, tuple[float, float]] = {}
    for node in nodes:
        seconds, joules = node_figures(node, power, now)
        for part in node.partitions:
            had = out.get(part, (0.0, 0.0))
            out[part] = (had[0] + seconds, had[1] + joules)
    return out
