"""Fake GPUs for nodes without NVIDIA hardware: a configured count and model."""

from __future__ import annotations

import hashlib

from corral.config import GpuConfig
from noded.gpu import GpuDevice


class FakeGpus:
    name = "fake"

    def __init__(self, config: GpuConfig, node_name: str) -> None:
        self.config = config
        self.node_name = node_name

    def discover(self) -> list[GpuDevice]:
        out = []
        for i in range(self.config.count):
            digest = hashlib.sha1(f"{self.node_name}/{i}".encode()).hexdigest()
            uuid = (
                f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
            )
            out.append(
                GpuDevice(
                    index=i,
                    model=self.config.model,
                    memory_mb=self.config.memory_mb,
                    uuid=uuid,
                    pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                )
            )
        return out
