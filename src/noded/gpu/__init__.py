"""GPU discovery behind one interface. Backends: ``none``, ``fake`` (NVML comes next).

A backend returns the node's GPUs as plain GpuDevice records; everything above it
(registration, allocation, CUDA_VISIBLE_DEVICES) is the same for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.config import GpuConfig


@dataclass(frozen=True)
class GpuDevice:
    index: int
    model: str
    memory_mb: int
    uuid: str
    pci_bus_id: str = ""


class GpuBackend(Protocol):
    name: str

    def discover(self) -> list[GpuDevice]: ...


class NoGpus:
    name = "none"

    def discover(self) -> list[GpuDevice]:
        return []


def make_backend(config: GpuConfig, node_name: str) -> GpuBackend:
    if config.backend == "fake":
        from noded.gpu.fake import FakeGpus

        return FakeGpus(config, node_name)
    return NoGpus()
