"""A simulated node: its resources as noded would report them, what its jobs hold,
its outbox of reports and health events."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from corral.localcluster.simnodes.script import Script
from corral.wire import corral_pb2 as pb


@dataclass
class SimJob:
    job: pb.Job
    script: Script
    started: float
    timer: asyncio.TimerHandle | None = None


@dataclass
class SimNode:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    resources: pb.NodeResources
    boot_time: float = field(default_factory=time.time)
    registered: bool = False
    crashed: bool = False
    jobs: set[int] = field(default_factory=set)  # jobs whose batch step runs here
    used_cpus: int = 0
    used_mem_mb: int = 0
    used_gpus: set[int] = field(default_factory=set)
    outbox: list[pb.JobStatusUpdate] = field(default_factory=list)
    health: list[pb.NodeHealthEvent] = field(default_factory=list)
    beat_now: asyncio.Event = field(default_factory=asyncio.Event)


def gpu_status(node: SimNode) -> list[pb.GpuStatus]:
    """What a real noded's heartbeat says of its GPUs: busy while a job holds them."""
    return [
        pb.GpuStatus(
            index=i,
            util_pct=95.0 if i in node.used_gpus else 0.0,
            memory_used_mb=40960.0 if i in node.used_gpus else 0.0,
        )
        for i in range(node.gpus)
    ]


def resources(cpus: int, memory_mb: int, gpus: int, model: str) -> pb.NodeResources:
    res = pb.NodeResources(
        cpus=cpus,
        memory_mb=memory_mb,
        sockets=2 if cpus % 2 == 0 and cpus > 1 else 1,
        threads_per_core=1,
        gpu_backend="fake" if gpus else "none",
    )
    res.cores_per_socket = cpus // res.sockets
    for i in range(gpus):
        res.gpus.add(
            index=i,
            model=model,
            memory_mb=81559,
            uuid=f"GPU-sim-{i:04d}",
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            minor=i,
        )
    return res
