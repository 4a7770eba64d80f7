"""What this node has: CPUs and memory from psutil, GPUs from the configured backend.

A size given in the node's config entry wins over discovery, so a fake node on a
laptop can claim 64 CPUs; ctld allocates against what the node registers.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
import structlog

from corral.config import NodeConfig
from corral.wire import corral_pb2 as pb
from noded.gpu import GpuBackend, GpuDevice, make_backend

log = structlog.get_logger("noded")


@dataclass
class Discovered:
    resources: pb.NodeResources
    gpus: GpuBackend
    devices: list[GpuDevice]


def discover(config: NodeConfig, node_name: str, spool_dir: str) -> Discovered:
    """Raises GpuError when the configured GPU backend cannot work (noded refuses to start)."""
    cpus = config.cpus or psutil.cpu_count(logical=True) or 1
    memory_mb = config.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
    backend, why = make_backend(config.gpus, node_name, spool_dir)
    devices = backend.discover()
    links = backend.topology()
    log.info("GPU backend chosen", node=node_name, backend=backend.name, why=why)
    log.info(
        "resources discovered",
        node=node_name,
        cpus=cpus,
        memory_mb=memory_mb,
        gpu_backend=backend.name,
        gpus=len(devices),
        cpus_from="config" if config.cpus else "psutil",
        memory_from="config" if config.memory_mb else "psutil",
    )
    res = pb.NodeResources(
        cpus=cpus,
        memory_mb=memory_mb,
        threads_per_core=1,
        sockets=1,
        cores_per_socket=cpus,
        gpu_backend=backend.name,
    )
    for g in devices:
        gpu = res.gpus.add(
            index=g.index,
            model=g.model,
            memory_mb=g.memory_mb,
            uuid=g.uuid,
            pci_bus_id=g.pci_bus_id,
            minor=g.minor,
            mig_enabled=g.mig_enabled,
            mig_devices=len(g.mig_devices),
        )
        for (a, b), link in links.items():
            if a == g.index:
                gpu.links[b] = link
            elif b == g.index:
                gpu.links[a] = link
    return Discovered(res, backend, devices)
