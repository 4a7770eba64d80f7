"""The node state machine (ctld/model/nodestate.py): each event's effect, impossible events
refused without a change, every change with its cause, and the drains' and DOWNs'
causes kept in the store through a restart."""

from __future__ import annotations

import pytest

from corral.clock import ManualClock
from corral.config import parse_config
from corral.errors import InvalidTransition
from corral.identity import Identity
from corral.testing.inprocess import make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.model import nodestate as ns
from ctld.model.nodes import NodeRecord

NS = pb.NodeState
ROOT = Identity("root", 0, 0)
CONFIG = parse_config(
    {
        "nodes": [{"names": "n[1-2]"}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True}],
    }
)


def node() -> NodeRecord:
    return NodeRecord(name="n1", config=CONFIG.nodes[0], partitions=["gpu"])


def up() -> NodeRecord:
    n = node()
    ns.transition(n, "registered", cause="node:n1 RegisterNode", now=1.0, address="a:1")
    return n


def test_a_registration_brings_a_node_up_with_what_it_sent() -> None:
    n = up()
    assert n.registered and n.responding and n.state == NS.NODE_STATE_IDLE
    assert n.address == "a:1"
    assert n.last is not None and (n.last.event, n.last.cause) == (
        "registered",
        "node:n1 RegisterNode",
    )
    wire = n.to_wire()
    assert wire.last_change.event == "registered" and wire.last_change.time == 1.0


def test_liveness_late_heard_lost_and_back() -> None:
    n = up()
    ns.transition(n, "late", cause="monitor:heartbeat", now=2.0)
    assert n.late and n.to_wire().not_responding and not n.schedulable
    ns.transition(n, "heard", cause="node:n1 Heartbeat", now=3.0)
    assert not n.late and n.schedulable
    ns.transition(n, "heartbeat_lost", cause="monitor:heartbeat", now=9.0)
    assert n.down and n.state == NS.NODE_STATE_DOWN and n.reason == "Not responding"
    assert (n.last.event, n.last.cause, n.last.time) == ("heartbeat_lost", "monitor:heartbeat", 9.0)  # type: ignore[union-attr]
    ns.transition(n, "registered", cause="node:n1 RegisterNode", now=10.0)
    assert not n.down and n.reason == "" and n.schedulable


def test_an_operator_s_down_outlives_a_registration_until_resume() -> None:
    n = up()
    ns.transition(n, "downed", cause="rpc:UpdateNode bob", now=2.0, reason="psu", user="bob")
    ns.transition(n, "registered", cause="node:n1 RegisterNode", now=3.0)
    assert n.down and n.admin_down and n.reason == "psu" and n.reason_user == "bob"
    ns.transition(n, "resumed", cause="rpc:UpdateNode bob", now=4.0)
    assert not n.down and not n.registered and n.reason == ""  # it registers again


def test_a_drain_keeps_its_reason_through_down_and_undrain_clears_it() -> None:
    n = up()
    ns.transition(n, "drained", cause="node:n1 fault", now=2.0, reason="GPU 3 XID 79")
    ns.transition(n, "heartbeat_lost", cause="monitor:heartbeat", now=3.0)
    assert n.drain and n.down and n.reason == "GPU 3 XID 79"
    ns.transition(n, "undrained", cause="rpc:UpdateNode root", now=4.0)
    assert not n.drain and n.reason == "Not responding"  # still silent


@pytest.mark.parametrize(
    ("event", "prepare"),
    [
        ("heard", ()),  # not late
        ("resumed", ()),  # not DOWN
        ("undrained", ()),  # not drained
        ("fenced", ()),  # not fencing
        ("heartbeat_lost", ("heartbeat_lost",)),  # DOWN already
        ("late", ("heartbeat_lost",)),  # a DOWN node is not late
        ("fencing", ("fencing",)),
        ("rebooted", ()),  # no such event
    ],
)
def test_impossible_events_are_refused_and_change_nothing(
    event: str, prepare: tuple[str, ...]
) -> None:
    n = up()
    for earlier in prepare:
        ns.transition(n, earlier, cause="test", now=2.0)
    before = (n.registered, n.responding, n.down, n.late, n.drain, n.fencing, n.reason, n.last)
    with pytest.raises(InvalidTransition, match="node n1"):
        ns.transition(n, event, cause="test:impossible", now=5.0)
    after = (n.registered, n.responding, n.down, n.late, n.drain, n.fencing, n.reason, n.last)
    assert after == before


def test_only_a_registration_sets_what_a_noded_sent() -> None:
    n = up()
    with pytest.raises(InvalidTransition):
        ns.transition(n, "drained", cause="x", now=1.0, reason="r", address="b:2")
    with pytest.raises(InvalidTransition):
        ns.transition(n, "registered", cause="x", now=1.0, drain=True)
    assert n.address == "a:1" and not n.drain


async def test_drain_and_down_causes_are_stored_and_read_back(store_url: str) -> None:
    clock = ManualClock()
    cluster = make_cluster(CONFIG, store_url, clock=clock)
    await register_all(cluster)
    await cluster.update_node(ROOT, pb.UpdateNodeRequest(names=["n1"], state="DRAIN", reason="fan"))
    await cluster.update_node(ROOT, pb.UpdateNodeRequest(names=["n2"], state="DOWN", reason="psu"))
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    assert n1.last is not None and (n1.last.event, n1.last.cause) == (
        "drained",
        "rpc:UpdateNode root",
    )
    assert n2.last is not None and n2.last.event == "downed"
    cluster.store.close()
    again = make_cluster(CONFIG, store_url, clock=clock)
    try:
        r1, r2 = again.nodes["n1"], again.nodes["n2"]
        assert r1.drain and r1.reason == "fan"
        assert r1.last is not None and (r1.last.event, r1.last.cause) == (
            "drained",
            "rpc:UpdateNode root",
        )
        assert r2.down and r2.admin_down and r2.reason == "psu"
        assert r2.last is not None and r2.last.cause == "rpc:UpdateNode root"
        assert again.node_list(["n2"])[0].last_change.event == "downed"
    finally:
        again.store.close()
