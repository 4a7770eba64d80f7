"""An in-process ctld for fast tests of its logic: a real store, a recording dispatcher.

Nomad's scheduler harness and dask's gen_cluster are the models: everything but the
network is real, and the clock is a number the test moves.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from corral.config import ClusterConfig
from corral.errors import NodeUnreachable
from corral.wire import corral_pb2 as pb
from ctld.cluster import Cluster
from ctld.nodes import NodeRecord
from ctld.store import Store


@dataclass
class RecordingDispatcher:
    """Records what ctld would send to nodes.

    ``fail_launch`` simulates an unreachable node; while ``hold_launches`` is set, a
    launch waits for ``launch_gate``, so a test can act while a LaunchJob is in flight.
    """

    launched: list[tuple[str, pb.LaunchJobRequest]] = field(default_factory=list)
    signalled: list[tuple[str, pb.SignalJobRequest]] = field(default_factory=list)
    fail_launch: bool = False
    hold_launches: bool = False
    launch_gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None:
        if self.hold_launches:
            await self.launch_gate.wait()
        if self.fail_launch:
            raise NodeUnreachable(f"node {node.name} unreachable (test)")
        self.launched.append((node.name, request))

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool:
        self.signalled.append((node.name, request))
        return True


@dataclass
class ManualClock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


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
