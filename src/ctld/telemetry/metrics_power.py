"""Power saving's metrics (issue 27): each node's power state, the seconds powered down
and the energy saved per node and per partition (ctld/model/power_energy.py), and the power
manager's counts of power-ups, power-downs and failed resumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from corral.wire import corral_pb2 as pb
from ctld.model import power_energy

if TYPE_CHECKING:
    from ctld.control.cluster import Cluster


def power_families(c: Cluster) -> Iterator[Metric]:
    cfg, now = c.config.power, c.clock()
    state = GaugeMetricFamily(
        "corral_node_power_state",
        "1 for each node's power state: ON, POWERED_DOWN, POWERING_UP, POWERING_DOWN",
        labels=["node", "power"],
    )
    down = CounterMetricFamily(
        "corral_node_powered_down_seconds",
        "Seconds a node has been powered down since ctld started",
        labels=["node"],
    )
    saved = CounterMetricFamily(
        "corral_node_energy_saved_joules",
        "Energy saved by powering a node down, at [power] idle_watts less powered_down_watts",
        labels=["node"],
    )
    for name, node in sorted(c.nodes.items()):
        word = pb.NodePower.Name(node.power).removeprefix("NODE_POWER_")  # type: ignore[arg-type]
        state.add_metric([name, word], 1.0)
        seconds, joules = power_energy.node_figures(node, cfg, now)
        down.add_metric([name], seconds)
        saved.add_metric([name], joules)
    yield from (state, down, saved)
    part_down = CounterMetricFamily(
        "corral_partition_powered_down_seconds",
        "Node-seconds powered down over a partition's nodes since ctld started",
        labels=["partition"],
    )
    part_saved = CounterMetricFamily(
        "corral_partition_energy_saved_joules",
        "Energy saved by powering a partition's nodes down",
        labels=["partition"],
    )
    parts = power_energy.by_partition(c.nodes.values(), cfg, now)
    for part, (seconds, joules) in sorted(parts.items()):
        part_down.add_metric([part], seconds)
        part_saved.add_metric([part], joules)
    yield from (part_down, part_saved)
    p = c.power
    for name, value, doc in (
        ("corral_power_resumes", p.resumes, "Nodes powered up (resume_program runs)"),
        ("corral_power_suspends", p.suspends, "Nodes powered down (suspend_program runs)"),
        ("corral_power_resume_failures", p.resume_failures, "Nodes that failed to resume"),
    ):
        counter = CounterMetricFamily(name, doc)
        counter.add_metric([], value)
        yield counter
