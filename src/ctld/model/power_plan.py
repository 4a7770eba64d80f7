"""Power saving's decisions, read from the nodes and the config alone (no change made
here: ``ctld/powersave/power.py`` makes them, through the node state machine).

Which nodes the scheduler may plan on though they are off (and from when), which idle
nodes are due to be powered down, and which jobs of a plan wait for a power-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.config import ClusterConfig
from corral.config.power import NEVER
from ctld.model.nodes import POWER_ON, POWERED_DOWN, POWERING_UP, NodeRecord
from ctld.sched import Plan

SLACK_S = 2.0  # a forecast this close to a power-up's end waits for that power-up


def plannable(node: NodeRecord) -> bool:
    """Off or booting, and nothing else keeps jobs off it: the scheduler plans on it."""
    return (
        node.power in (POWERED_DOWN, POWERING_UP)
        and not (node.down or node.drain or node.power_down_pending)
        and node.resources.cpus > 0
    )


def available_at(node: NodeRecord, config: ClusterConfig, now: float) -> float:
    """When a node that is off (or booting) can be expected to take work: its power-up's
    end, ``resume_timeout`` after it starts (now, for one not yet asked)."""
    if not plannable(node):
        return 0.0
    timeout = config.power.resume_timeout_s
    if node.power == POWERING_UP:
        return max(now + 1.0, node.power_since + timeout)
    return now + timeout


def suspend_time(node: NodeRecord, config: ClusterConfig) -> int:
    """The node's suspend_time: its node set's, else the longest of its partitions', else
    [power]'s (NEVER: it is not powered down for idling); NEVER for an excluded node."""
    power = config.power
    if not power.suspend_program or node.name in power.suspend_exc_nodes:
        return NEVER
    if any(p in power.suspend_exc_parts for p in node.partitions):
        return NEVER
    if node.config.suspend_time_s is not None:
        return node.config.suspend_time_s
    own = [
        p.suspend_time_s
        for p in config.partitions
        if node.name in p.nodes and p.suspend_time_s is not None
    ]
    if own:
        return NEVER if NEVER in own else max(own)
    return power.suspend_time_s


def may_suspend(node: NodeRecord) -> bool:
    """Up, idle, and nothing in the way (a DOWN node's machine is not ctld's to judge)."""
    return (
        node.power == POWER_ON
        and node.registered
        and node.responding
        and not (node.down or node.late or node.fencing or node.job_ids)
    )


def due(
    nodes: Iterable[NodeRecord], idle_since: Mapping[str, float], config: ClusterConfig, now: float
) -> list[NodeRecord]:
    """Idle nodes past their suspend_time, longest idle first; and those whose power-down
    was asked (POWER_DOWN_ASAP) once their jobs are gone."""
    ready: list[tuple[float, NodeRecord]] = []
    for node in nodes:
        if not may_suspend(node):
            continue
        since = idle_since.get(node.name, now)
        if node.power_down_pending:
            ready.append((float("-inf"), node))
            continue
        limit = suspend_time(node, config)
        if limit != NEVER and now - since >= limit:
            ready.append((since, node))
    ready.sort(key=lambda pair: (pair[0], pair[1].name))
    return [node for _, node in ready]


def waiting_for_power(
    plan: Plan, nodes: Mapping[str, NodeRecord], config: ClusterConfig, now: float
) -> dict[int, list[str]]:
    """The plan's jobs whose forecast is bound by a power-up: job id -> the nodes to
    power up for it. A job forecast later than the power-up would end waits for
    something else first, and wakes nothing yet. Forecasts are made one job at a time
    (the core holds only the top job's), so several jobs may name the same node that
    is off: the first to name it has it, and each other gets another like it (same
    node set, same partitions), as Slurm gives each job its own nodes to resume. A
    node already booting that no forecast names is given first: the next pass after
    a burst's power-up sees the burst again, and must not wake a second set for it."""
    bound: list[tuple[int, list[NodeRecord]]] = []
    for job_id, forecast in plan.forecasts.items():
        off = [nodes[n] for n in forecast.nodes if n in nodes and plannable(nodes[n])]
        if not off:
            continue
        ready = max(available_at(n, config, now) for n in off)
        if forecast.start <= ready + SLACK_S:
            bound.append((job_id, off))
    # the nodes named first, all of them, before any job is given another like one
    claimed: set[str] = set()
    twins: list[tuple[int, NodeRecord]] = []
    waiting: dict[int, list[str]] = {}
    for job_id, off in bound:
        mine = waiting.setdefault(job_id, [])
        for node in off:
            if node.name in claimed:
                twins.append((job_id, node))
            else:
                claimed.add(node.name)
                mine.append(node.name)
    if twins:
        spare = _spare(nodes, claimed)
        for job_id, node in twins:
            pool = spare.get((id(node.config), tuple(node.partitions)), [])
            if pool:
                waiting[job_id].append(pool.pop())
    return waiting


def _spare(
    nodes: Mapping[str, NodeRecord], claimed: set[str]
) -> dict[tuple[int, tuple[str, ...]], list[str]]:
    """The nodes off that no job has, by node set and partitions, to be popped: those
    already booting first (no new power-up), then those powered down, each by name."""
    spare: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    free = [n for n in nodes.values() if n.name not in claimed and plannable(n)]
    for node in sorted(free, key=lambda n: (n.power != POWERING_UP, n.name), reverse=True):
        spare.setdefault((id(node.config), tuple(node.partitions)), []).append(node.name)
    return spare
