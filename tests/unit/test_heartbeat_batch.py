"""NodeController.Heartbeats: many nodes' heartbeats in one call, each handled as its
own Heartbeat (an unregistered or unknown node is told to register again); with node
certificates a batch may name only the caller's own node."""

from __future__ import annotations

import pytest

from corral.errors import PermissionDenied
from corral.testing.inprocess import InProcessCluster
from corral.wire import corral_pb2 as pb
from ctld.api.auth import Caller
from ctld.api.rpc import NodeControllerApi


@pytest.mark.timeout(60)
def test_a_batch_is_each_beat_and_names_who_must_register(
    inprocess_factory: object,
) -> None:
    c: InProcessCluster = inprocess_factory(nodes=3, register=False)  # type: ignore[operator]
    first, second, third = c.node_names
    c.register_nodes([first, second])
    api = NodeControllerApi(c.cluster, verify_nodes=False)
    c.clock.advance(5)
    beats = pb.HeartbeatBatch(
        beats=[pb.HeartbeatRequest(name=n) for n in (first, second, third, "nosuch")]
    )
    reply = c.run(api.call("Heartbeats", beats, Caller()))
    assert list(reply.reregister) == [third, "nosuch"]
    assert c.cluster.nodes[first].last_heartbeat == c.clock()
    assert c.cluster.nodes[second].last_heartbeat == c.clock()


@pytest.mark.timeout(60)
def test_with_certificates_a_batch_names_only_the_callers_node(
    inprocess_cluster: InProcessCluster,
) -> None:
    c = inprocess_cluster
    mine, other = c.node_names[:2]
    api = NodeControllerApi(c.cluster, verify_nodes=True)
    own = pb.HeartbeatBatch(beats=[pb.HeartbeatRequest(name=mine)])
    assert not c.run(api.call("Heartbeats", own, Caller(peer_cert=mine))).reregister
    both = pb.HeartbeatBatch(beats=[pb.HeartbeatRequest(name=n) for n in (mine, other)])
    with pytest.raises(PermissionDenied, match=f"may not act as node '{other}'"):
        c.run(api.call("Heartbeats", both, Caller(peer_cert=mine)))
