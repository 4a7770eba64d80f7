"""Pieces for tests that drive ctld's Cluster directly (async tests of its logic).

The in-process harness itself (``InProcessCluster``, its ``RecordingDispatcher`` and
``ManualClock``) lives in corral/testing/inprocess.py, beside the real-process one.
"""

from __future__ import annotations

from corral.config import ClusterConfig
from corral.testing.inprocess import ManualClock, RecordingDispatcher
from corral.wire import corral_pb2 as pb
from ctld.cluster import Cluster
from ctld.store import Store

__all__ = ["ManualClock", "RecordingDispatcher", "make_cluster", "register_all", "registration"]


def make_cluster(
    config: ClusterConfig,
    store_url: str,
    *,
    clock: ManualClock | None = None,
    dispatcher: RecordingDispatcher | None = None,
) -> Cluster:
    """A loaded Cluster on ``store_url`` (open it inside a running event loop)."""
    store = Store(store_url, sqlite_synchronous="NORMAL")
    store.open()
    cluster = Cluster(
        config, store, dispatcher or RecordingDispatcher(), clock=clock or ManualClock()
    )
    cluster.load()
    return cluster


def registration(
    cluster: Cluster, name: str, *, cpus: int = 8, memory_mb: int = 16384, gpus: int = 8
) -> pb.RegisterNodeRequest:
    """What the noded named ``name`` would send, running nothing."""
    res = pb.NodeResources(cpus=cpus, memory_mb=memory_mb)
    for g in range(gpus):
        res.gpus.add(index=g, model="NVIDIA H100 80GB HBM3", memory_mb=81559)
    index = list(cluster.nodes).index(name)
    return pb.RegisterNodeRequest(name=name, address=f"127.0.0.{index + 2}:1", resources=res)


async def register_all(
    cluster: Cluster, *, cpus: int = 8, memory_mb: int = 16384, gpus: int = 8
) -> None:
    for name in cluster.nodes:
        await cluster.register_node(
            registration(cluster, name, cpus=cpus, memory_mb=memory_mb, gpus=gpus)
        )
