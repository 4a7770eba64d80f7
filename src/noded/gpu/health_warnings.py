"""GPU health warnings through NVML: signs that a GPU is degrading before it fails.

A warning drains the node like a fault does, with a "GPU health warning" reason, so that
checkpointing jobs there are signalled and requeued before the GPU gives out:

- correctable (single-bit) ECC errors rising by at least ``ecc_corrected_warn`` within
  one health poll (the volatile counter, reset by a driver reload);
- hardware slowdown, thermal or power-brake throttling for ``throttle_warn_polls``
  polls in a row (one throttled sample is a transient, a sustained one is a cooling or
  power fault);
- a non-fatal XID from WARNING_XIDS.

pynvml is passed in (the module, or a stand-in in tests); its values are typed Any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noded.gpu import HealthEvent

# NVIDIA's XID catalogue: errors after which the GPU keeps working but is degrading
# (63: a row remapping / page retirement was recorded, applied at the next reset;
# 92: high single-bit ECC error rate; 94: a contained ECC error, the GPU continues
# and a reset is recommended). Every other hardware XID (64, 79, 95, ...) stays fatal.
WARNING_XIDS = {
    63: "row remap pending",
    92: "high single-bit ECC rate",
    94: "contained ECC error",
}

# nvmlClocksEventReason* bits (stable ABI values; older pynvml names them
# nvmlClocksThrottleReason*): the ones that mean heat or a power fault, not an
# application's clock setting or an idle GPU.
THROTTLE_BITS = {
    0x8: "HW slowdown",  # HwSlowdown
    0x20: "SW thermal slowdown",  # SwThermalSlowdown
    0x40: "HW thermal slowdown",  # HwThermalSlowdown
    0x80: "HW power brake",  # HwPowerBrakeSlowdown
}


@dataclass
class _Track:
    corrected: int | None  # last volatile corrected ECC count; None: not supported
    throttle_supported: bool = True
    throttled_polls: int = 0
    warned: set[str] = field(default_factory=set)  # conditions reported, until they clear


class GpuWarnings:
    def __init__(self, nv: Any, ecc_corrected_warn: int, throttle_warn_polls: int) -> None:
        self._nv = nv
        self.ecc_limit = ecc_corrected_warn  # 0: off
        self.throttle_polls = throttle_warn_polls  # 0: off
        self._tracks: dict[int, _Track] = {}

    def start(self, index: int, handle: Any) -> None:
        """Baseline for one GPU, read when noded opens NVML."""
        self._tracks[index] = _Track(self._corrected(handle) if self.ecc_limit else None)

    def xid(self, index: int, code: int) -> HealthEvent | None:
        """A warning for a non-fatal XID; None for any other code."""
        what = WARNING_XIDS.get(code)
        return None if what is None else HealthEvent("warning", index, f"XID {code} ({what})")

    def poll(self, index: int, handle: Any, out: list[HealthEvent]) -> None:
        """Append this GPU's new warnings; NVMLErrors other than NotSupported propagate."""
        track = self._tracks.setdefault(index, _Track(None))
        self._poll_ecc(index, handle, track, out)
        self._poll_throttle(index, handle, track, out)

    def _poll_ecc(self, index: int, handle: Any, track: _Track, out: list[HealthEvent]) -> None:
        if track.corrected is None:
            return
        n = self._corrected(handle)
        if n is None:
            track.corrected = None
            return
        rise = n - track.corrected
        track.corrected = n
        if rise >= self.ecc_limit:
            if "ecc" not in track.warned:
                track.warned.add("ecc")
                out.append(HealthEvent("warning", index, f"correctable ECC +{rise}/poll"))
        else:
            track.warned.discard("ecc")

    def _poll_throttle(
        self, index: int, handle: Any, track: _Track, out: list[HealthEvent]
    ) -> None:
        if not self.throttle_polls or not track.throttle_supported:
            return
        reasons = self._throttle_reasons(handle)
        if reasons is None:
            track.throttle_supported = False
            return
        names = [name for bit, name in THROTTLE_BITS.items() if reasons & bit]
        if not names:
            track.throttled_polls = 0
            track.warned.discard("throttle")
            return
        track.throttled_polls += 1
        if track.throttled_polls >= self.throttle_polls and "throttle" not in track.warned:
            track.warned.add("throttle")
            detail = f"{', '.join(names)} for {track.throttled_polls} polls"
            out.append(HealthEvent("warning", index, detail))

    def _corrected(self, handle: Any) -> int | None:
        nv = self._nv
        try:
            return int(
                nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
                )
            )
        except nv.NVMLError_NotSupported:
            return None  # no ECC on this GPU, or ECC turned off

    def _throttle_reasons(self, handle: Any) -> int | None:
        nv = self._nv
        # nvmlDeviceGetCurrentClocksEventReasons since driver 535; the older name before.
        query = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if query is None:
            return None
        try:
            return int(query(handle))
        except nv.NVMLError_NotSupported:
            return None
