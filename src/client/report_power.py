"""corral report --power: what power saving saved, per node and per partition, since
ctld started: the hours each node was powered down and the energy that is at [power]
idle_watts less powered_down_watts (ctld works the joules out: GetNodes)."""

from __future__ import annotations

from client.views.node import Node


def _hours_kwh(node: Node) -> tuple[float, float]:
    return node.powered_down_s / 3600, node.energy_saved_j / 3.6e6


def format_power(nodes: list[Node]) -> str:
    lines = [f"{'Node':<16} {'Partition':<15} {'Hours down':>11} {'kWh saved':>10}"]
    parts: dict[str, list[float]] = {}
    for node in nodes:
        hours, kwh = _hours_kwh(node)
        partitions = list(node.partitions) or ["-"]
        where = ",".join(partitions)
        lines.append(f"{node.name:<16} {where:<15} {hours:>11.2f} {kwh:>10.2f}")
        for part in partitions:
            row = parts.setdefault(part, [0.0, 0.0])
            row[0], row[1] = row[0] + hours, row[1] + kwh
    lines.append("")
    lines.append(f"{'Partition':<16} {'':<15} {'Hours down':>11} {'kWh saved':>10}")
    for part, (hours, kwh) in sorted(parts.items()):
        lines.append(f"{part:<16} {'':<15} {hours:>11.2f} {kwh:>10.2f}")
    total_h = sum(_hours_kwh(n)[0] for n in nodes)
    total_kwh = sum(_hours_kwh(n)[1] for n in nodes)
    lines.append(f"{'total':<16} {'':<15} {total_h:>11.2f} {total_kwh:>10.2f}")
    return "\n".join(lines) + "\n"


def power_report() -> int:
    from client.common import client

    reply = client().get_nodes({"withHidden": True})  # powered-down cloud nodes save most
    print(format_power([Node(n) for n in reply.get("nodes") or ()]), end="")
    return 0
