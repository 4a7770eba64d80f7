"""corral report --power: what power saving saved, per node and per partition, since
ctld started: the hours each node was powered down and the energy that is at [power]
idle_watts less powered_down_watts (ctld works the joules out: GetNodes)."""

from __future__ import annotations

from client.common import Json, real, text


def _hours_kwh(node: Json) -> tuple[float, float]:
    return real(node, "poweredDownS") / 3600, real(node, "energySavedJ") / 3.6e6


def format_power(nodes: list[Json]) -> str:
    lines = [f"{'Node':<16} {'Partition':<15} {'Hours down':>11} {'kWh saved':>10}"]
    parts: dict[str, list[float]] = {}
    for node in nodes:
        hours, kwh = _hours_kwh(node)
        partitions = [str(p) for p in node.get("partitions", [])] or ["-"]
        where = ",".join(partitions)
        lines.append(f"{text(node, 'name'):<16} {where:<15} {hours:>11.2f} {kwh:>10.2f}")
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

    reply: Json = client().get_nodes({})
    print(format_power(list(reply.get("nodes", []))), end="")
    return 0
