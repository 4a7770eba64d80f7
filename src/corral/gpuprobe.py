"""Whether this machine has NVIDIA GPUs NVML can see: ``corral up --gpus auto|nvml``.

The command's own look (it imports no daemon): NVML started, counted and closed
again. noded looks again when it starts (noded/gpu/nvml.py) and registers what it
finds; this only decides which backend the local cluster's config names.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Probe:
    count: int
    model: str = ""
    memory_mb: int = 0
    driver: str = ""
    why_not: str = ""  # when count is 0: what NVML said


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_nvml(nvml: Any = None) -> Probe:
    """What NVML sees now (``nvml``: the pynvml module, for tests)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return Probe(0, why_not="the pynvml module is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return Probe(0, why_not=f"NVML does not start: {_text(exc) or type(exc).__name__}")
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if not count:
            return Probe(0, why_not="NVML sees no GPU")
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
        return Probe(
            count,
            model=_text(nvml.nvmlDeviceGetName(handle)),
            memory_mb=memory,
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
        )
    except Exception as exc:
        return Probe(0, why_not=f"NVML failed: {_text(exc) or type(exc).__name__}")
    finally:
        with contextlib.suppress(Exception):  # nothing to undo
            nvml.nvmlShutdown()
