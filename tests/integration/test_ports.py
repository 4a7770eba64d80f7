"""A daemon never shares a taken port (gRPC's SO_REUSEPORT default would let it, and
the kernel would then split its connections with whatever else listens there)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from corral.localcluster import layout as cluster_mod
from corral.testing.cluster import ClusterFactory


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another server holds, listening with SO_REUSEPORT as gRPC servers do."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_ctld_refuses_a_taken_port_and_says_so(
    cluster_factory: ClusterFactory, taken_port: int
) -> None:
    with pytest.raises(RuntimeError, match=f"cannot listen on .*:{taken_port}"):
        cluster_factory(nodes=1, gpus_per_node=0, node_port=taken_port)


def test_the_harness_moves_to_fresh_ports_when_a_chosen_one_was_taken(
    cluster_factory: ClusterFactory, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = iter([taken_port])
    real = cluster_mod.free_port
    # the first port the harness picks is taken by the time ctld binds it
    monkeypatch.setattr(
        cluster_mod, "free_port", lambda host="127.0.0.1": next(chosen, None) or real(host)
    )
    c = cluster_factory(nodes=1, gpus_per_node=0)
    assert taken_port not in (c.grpc_port, c.http_port, c.node_port)
    assert c.client().get_nodes({})["nodes"][0]["state"] == "NODE_STATE_IDLE"
