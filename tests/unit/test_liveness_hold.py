"""ctld's side of a controller away (ctld/fleet/liveness.py, issue 35), on virtual time: most
nodes silent at once is ctld's outage, not theirs; one node silent alone is that node's."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from corral.clock import ManualClock
from corral.config import parse_config
from corral.quorum import hold_needed
from corral.testing.inprocess import make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster

CONFIG = parse_config(
    {
        "heartbeat": {"interval_s": 10, "timeout_s": 60},
        "nodes": [{"names": "n[1-3]"}],
        "partitions": [{"name": "p", "nodes": "n[1-3]", "default": True}],
    }
)


@pytest.fixture
async def env(tmp_path: pathlib.Path) -> AsyncIterator[tuple[Cluster, ManualClock]]:
    clock = ManualClock()
    cluster = make_cluster(CONFIG, f"sqlite:///{tmp_path}/ctld.db", clock=clock)
    await register_all(cluster)
    yield cluster, clock
    cluster.store.close()


async def _beat(cluster: Cluster, clock: ManualClock, seconds: int, *names: str) -> None:
    """``seconds`` of cluster time, ``names`` beating every 10 s, checks between."""
    for _ in range(seconds // 10):
        clock.advance(10)
        for name in names:
            assert cluster.heartbeat(pb.HeartbeatRequest(name=name))
        await cluster.check_heartbeats()


def _down(cluster: Cluster) -> set[str]:
    return {n.name for n in cluster.nodes.values() if n.down}


def test_the_rule_rounds_up_and_never_needs_none() -> None:
    assert [hold_needed(0.55, n) for n in (1, 2, 3, 4, 10, 50)] == [1, 2, 2, 3, 6, 28]
    assert hold_needed(1.0, 3) == 3 and hold_needed(0.01, 3) == 1


async def test_every_node_silent_for_any_length_is_declared_down_never(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    await _beat(cluster, clock, 600)  # ten timeouts: ctld away from all of them
    assert not _down(cluster)
    assert cluster.node_reports.verdicts.holding
    assert all(n.late for n in cluster.nodes.values())  # NOT_RESPONDING meanwhile


async def test_one_node_silent_alone_is_down_at_its_timeout(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    await _beat(cluster, clock, 50, "n1", "n2")
    assert not _down(cluster)
    await _beat(cluster, clock, 20, "n1", "n2")
    assert _down(cluster) == {"n3"}
    assert not cluster.node_reports.verdicts.holding


async def test_once_most_are_heard_again_the_silent_are_timed_afresh(env) -> None:  # type: ignore[no-untyped-def]
    """A node still cut off when ctld hears the others again gets a full timeout from
    then: time to see its peers hear ctld and fence (noded/witness.py)."""
    cluster, clock = env
    await _beat(cluster, clock, 300)  # all silent: held
    await _beat(cluster, clock, 60, "n1", "n2")  # two back: n3 timed from their return
    assert not _down(cluster)
    await _beat(cluster, clock, 20, "n1", "n2")  # past the timeout (checks every 10 s)
    assert _down(cluster) == {"n3"}


async def test_a_node_whose_beats_say_it_does_not_hear_ctld_counts_as_silent(env) -> None:  # type: ignore[no-untyped-def]
    """Its beats arrive but ctld's answers do not: it is silent on both sides."""
    cluster, clock = env
    for _ in range(10):
        clock.advance(10)
        assert cluster.heartbeat(pb.HeartbeatRequest(name="n1"))
        assert cluster.heartbeat(pb.HeartbeatRequest(name="n2", deaf_s=clock() % 1000))
        await cluster.check_heartbeats()
    # n2 beats but says it is deaf, n3 is silent: two of three, ctld holds
    assert cluster.node_reports.verdicts.holding and not _down(cluster)


async def test_ctld_holds_at_the_smallest_number_a_node_may_still_believe(env) -> None:  # type: ignore[no-untyped-def]
    cluster, clock = env
    verdicts = cluster.node_reports.verdicts
    assert verdicts.tell("n1") == 2
    verdicts.told["n1"] = 1  # as if n1 was told 1 before nodes were added, then cut off
    await _beat(cluster, clock, 70, "n2", "n3")
    assert verdicts.holding and not _down(cluster)  # n1 may be keeping its jobs: so do we
    verdicts.forget("n1")  # once DOWN or powered off its number no longer binds
    await _beat(cluster, clock, 60, "n2", "n3")  # timed from the end of the hold
    assert not _down(cluster)
    await _beat(cluster, clock, 20, "n2", "n3")
    assert _down(cluster) == {"n1"}
