"""What this node has: CPUs and memory from psutil, GPUs from the configured backend.

A size given in the node's config entry wins over discovery, so a fake node on a
laptop can claim 64 CPUs; ctld allocates against what the node registers.
"""

from __future__ import annotations

import psutil
import structlog

from corral.config import NodeConfig
from corral.wire import corral_pb2 as pb
from noded.gpu import make_backend

log = structlog.get_logger("noded")


def discover(config: NodeConfig, node_name: str) -> pb.NodeResources:
    cpus = config.cpus or psutil.cpu_count(logical=True) or 1
    memory_mb = config.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
    backend = make_backend(config.gpus, node_name)
    gpus = backend.discover()
    log.info(
        "resources discovered",
        node=node_name,
        cpus=cpus,
        memory_mb=memory_mb,
        gpu_backend=backend.name,
        gpus=len(gpus),
        cpus_from="config" if config.cpus else "psutil",
        memory_from="config" if config.memory_mb else "psutil",
    )
    res = pb.NodeResources(
        cpus=cpus, memory_mb=memory_mb, threads_per_core=1, sockets=1, cores_per_socket=cpus
    )
    for g in gpus:
        res.gpus.add(
            index=g.index,
            model=g.model,
            memory_mb=g.memory_mb,
            uuid=g.uuid,
            pci_bus_id=g.pci_bus_id,
        )
    return res
