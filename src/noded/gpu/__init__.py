"""GPU discovery, health and sampling behind one interface.

Backends: ``none``, ``fake`` (configured, with fault injection from a JSON file) and
``nvml`` (the NVIDIA management library through pynvml). A backend returns plain
records; everything above it (registration, allocation, CUDA_VISIBLE_DEVICES, health
draining) is the same for every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from corral.config import GpuConfig
from corral.errors import GpuError

REASON_MAX = 60  # sinfo -R shows the reason in a narrow column
WARNING_REASON = "GPU health warning:"  # a drain before a degrading GPU fails


@dataclass(frozen=True)
class MigDevice:
    index: int
    uuid: str
    profile: str  # e.g. "1g.10gb"; "" when it could not be told
    memory_mb: int


@dataclass(frozen=True)
class GpuDevice:
    index: int
    model: str
    memory_mb: int
    uuid: str
    pci_bus_id: str = ""
    minor: int = -1  # /dev/nvidia<minor>; -1 when unknown
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class HealthEvent:
    kind: str  # faults: "xid", "ecc", "lost", "nvml_error"; "warning": degrading, not failed
    gpu_index: int  # -1 when not about one GPU
    detail: str  # for "xid": "XID <code>"

    def reason(self) -> str:
        """Short text for a drained node's reason (``sinfo -R``)."""
        gpu = f"GPU {self.gpu_index}"
        if self.kind == "xid":
            text = f"{gpu} {self.detail}"
        elif self.kind == "ecc":
            text = f"{gpu} uncorrectable ECC errors"
        elif self.kind == "lost":
            text = f"{gpu} lost"
        elif self.kind == "warning":
            text = (
                f"{WARNING_REASON} {gpu} {self.detail}"
                if self.gpu_index >= 0
                else (f"{WARNING_REASON} {self.detail}")
            )
        elif self.kind == "nvml_error":
            text = f"NVML error: {self.detail}"
            if self.gpu_index >= 0:
                text = f"{gpu} {text}"
        else:
            text = f"{gpu} {self.kind}: {self.detail}" if self.gpu_index >= 0 else self.detail
        if len(text) > REASON_MAX:
            text = text[: REASON_MAX - 3] + "..."
        return text


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_pct: float
    memory_used_mb: float


class GpuBackend(Protocol):
    name: str

    def discover(self) -> list[GpuDevice]: ...

    def topology(self) -> dict[tuple[int, int], str]: ...

    def poll_health(self) -> list[HealthEvent]: ...

    def sample(self, indices: Sequence[int], pids: Collection[int]) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoGpus:
    name = "none"

    def discover(self) -> list[GpuDevice]:
        return []

    def topology(self) -> dict[tuple[int, int], str]:
        return {}

    def poll_health(self) -> list[HealthEvent]:
        return []

    def sample(self, indices: Sequence[int], pids: Collection[int]) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


def make_backend(config: GpuConfig, node_name: str, spool_dir: str) -> tuple[GpuBackend, str]:
    """The backend and one sentence for the log saying which was chosen and why."""
    if config.backend == "fake":
        from noded.gpu.fake import FakeGpus

        return FakeGpus(config, node_name, spool_dir), (
            f"fake: configured, {config.count} x {config.model}"
        )
    if config.backend == "nvml":
        from noded.gpu.nvml import NvmlGpus

        gpus = NvmlGpus(config.ecc_corrected_warn, config.throttle_warn_polls)  # or GpuError
        return gpus, (
            f"nvml: configured, NVML found {gpus.device_count()} GPUs "
            f"(driver {gpus.driver_version()})"
        )
    if config.backend == "auto":
        return _auto(config)
    return NoGpus(), "none: configured"


def _auto(config: GpuConfig) -> tuple[GpuBackend, str]:
    # Any failure here means "no usable GPUs", never a noded that will not start.
    try:
        from noded.gpu.nvml import NvmlGpus

        gpus = NvmlGpus(config.ecc_corrected_warn, config.throttle_warn_polls)
    except GpuError as e:
        cause = str(e).removeprefix("NVML unavailable: ")
        return NoGpus(), f"none: gpus = auto and NVML is unavailable: {cause}"
    count = gpus.device_count()
    if count == 0:
        gpus.close()
        return NoGpus(), "none: gpus = auto and NVML sees no GPU"
    return gpus, (f"nvml: gpus = auto and NVML found {count} GPUs (driver {gpus.driver_version()})")
