"""Fake GPUs for nodes without NVIDIA hardware: a configured count and model.

Load and faults come from a JSON state file that tests write, re-read on every call::

    {"util": {"0": 85.0}, "memory_used_mb": {"0": 1024},
     "events": [{"kind": "xid", "gpu": 3, "code": 79}, {"kind": "ecc", "gpu": 1},
                {"kind": "nvml_error", "detail": "..."},
                {"kind": "warning", "gpu": 0, "detail": "correctable ECC +500/poll"}],
     "lost": [2]}

"events" is append-only: each entry is reported once. A missing file means idle GPUs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Sequence
from typing import Any

import structlog

from corral.config import GpuConfig
from noded.gpu import GpuDevice, GpuSample, HealthEvent

log = structlog.get_logger("noded")

_PCIE_GROUP = 4  # GPUs behind one PCIe switch in the fake "pcie" layout


class FakeGpus:
    name = "fake"

    def __init__(self, config: GpuConfig, node_name: str, spool_dir: str = "") -> None:
        self.config = config
        self.node_name = node_name
        self.state_file = config.state_file or os.path.join(spool_dir, "fake-gpus.json")
        self._events_seen = 0
        self._lost_seen: set[int] = set()
        self._warned: set[str] = set()  # one warning per distinct problem, not per poll

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
                    minor=i,
                )
            )
        return out

    def topology(self) -> dict[tuple[int, int], str]:
        n = self.config.count
        out: dict[tuple[int, int], str] = {}
        for i in range(n):
            for j in range(i + 1, n):
                if self.config.topology == "pcie":
                    same = i // _PCIE_GROUP == j // _PCIE_GROUP
                    out[(i, j)] = "PXB" if same else "SYS"
                else:
                    out[(i, j)] = "NV18"  # what an HGX H100 board shows for every pair
        return out

    def poll_health(self) -> list[HealthEvent]:
        state = self._read()
        out: list[HealthEvent] = []
        events = state.get("events")
        if not isinstance(events, list):
            events = []
        # A rewritten, shorter list starts over rather than hiding new entries forever.
        if len(events) < self._events_seen:
            self._events_seen = 0
        for pos in range(self._events_seen, len(events)):
            ev = self._event(events[pos])
            if ev is None:
                self._warn(f"events[{pos}]", "ignoring invalid fake GPU event", entry=events[pos])
            else:
                out.append(ev)
        self._events_seen = len(events)
        for gpu in sorted(self._lost(state) - self._lost_seen):
            self._lost_seen.add(gpu)
            out.append(HealthEvent("lost", gpu, "fallen off the bus (injected)"))
        return out

    def sample(self, indices: Sequence[int], pids: Collection[int]) -> list[GpuSample]:
        state = self._read()
        lost = self._lost(state)
        util = _number_map(state.get("util"))
        mem = _number_map(state.get("memory_used_mb"))
        return [
            GpuSample(index=i, util_pct=util.get(i, 0.0), memory_used_mb=mem.get(i, 0.0))
            for i in indices
            if self._valid_gpu(i) and i not in lost
        ]

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ internals

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.state_file, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            self._warn(f"read:{e}", "ignoring unreadable fake GPU state file", error=str(e))
            return {}
        if not isinstance(data, dict):
            self._warn("read:not-object", "ignoring fake GPU state file: not a JSON object")
            return {}
        return data

    def _warn(self, key: str, message: str, **kw: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, path=self.state_file, **kw)

    def _valid_gpu(self, gpu: object) -> bool:
        return isinstance(gpu, int) and not isinstance(gpu, bool) and 0 <= gpu < self.config.count

    def _lost(self, state: dict[str, Any]) -> set[int]:
        lost = state.get("lost")
        if not isinstance(lost, list):
            return set()
        return {g for g in lost if self._valid_gpu(g)}

    def _event(self, entry: object) -> HealthEvent | None:
        if not isinstance(entry, dict):
            return None
        kind = entry.get("kind")
        gpu = entry.get("gpu", -1)
        detail = entry.get("detail")
        if kind == "nvml_error":
            if gpu != -1 and not self._valid_gpu(gpu):
                return None
            return HealthEvent("nvml_error", gpu, str(detail or "injected error"))
        if not self._valid_gpu(gpu):
            return None
        if kind == "xid":
            code = entry.get("code")
            if not isinstance(code, int) or isinstance(code, bool):
                return None
            return HealthEvent("xid", gpu, f"XID {code}")
        if kind == "ecc":
            return HealthEvent("ecc", gpu, str(detail or "uncorrectable ECC errors (injected)"))
        if kind == "warning":  # a degrading GPU: ECC rising, throttling, a non-fatal XID
            return HealthEvent("warning", gpu, str(detail or "injected"))
        if kind == "lost":
            self._lost_seen.add(gpu)  # so the "lost" list does not report it again
            return HealthEvent("lost", gpu, str(detail or "fallen off the bus (injected)"))
        return None


def _number_map(value: object) -> dict[int, float]:
    """{"0": 85.0} -> {0: 85.0}, dropping anything that is not index -> number."""
    if not isinstance(value, dict):
        return {}
    out: dict[int, float] = {}
    for k, v in value.items():
        try:
            idx = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[idx] = float(v)
    return out
