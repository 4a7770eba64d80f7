"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

pynvml is imported on first use, so this module imports on machines without it.
Every pynvml value is typed Any: the module has no type information.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from corral.errors import GpuError
from noded.gpu import GpuDevice, GpuSample, HealthEvent, MigDevice
from noded.gpu.health_warnings import GpuWarnings

log = structlog.get_logger("noded")

MIB = 1024 * 1024

# XIDs that NVIDIA's XID catalogue attributes to the application, not the hardware
# (13 graphics engine exception, 31 MMU fault, 43 stopped channel, 45 preemptive
# cleanup, 68 video decoder exception): draining a node for them would let one buggy
# job take nodes out of service.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})

# A storm of events must not keep poll_health from returning.
MAX_EVENTS_PER_POLL = 1000

# nvmlGpuTopologyLevel_t values (stable ABI numbers) -> nvidia-smi topo -m names.
TOPOLOGY_NAMES = {
    0: "PIX",  # INTERNAL: two GPUs on one board
    10: "PIX",  # SINGLE: one PCIe switch
    20: "PXB",  # MULTIPLE: several PCIe switches
    30: "PHB",  # HOSTBRIDGE
    40: "NODE",  # NODE: host bridges within one NUMA node
    50: "SYS",  # SYSTEM: across the CPU interconnect
}

_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb)")  # MIG device names end in e.g. "MIG 1g.10gb"

UNAVAILABLE = "NVML unavailable: "


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError as e:
        raise GpuError(
            UNAVAILABLE + "the pynvml module is not installed (pip install nvidia-ml-py)"
        ) from e
    return pynvml


def _text(value: Any) -> str:
    """Older pynvml releases return bytes for strings."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def nvml_error_text(exc: BaseException) -> str:
    """What an NVMLError means, in words an operator can act on."""
    nv = _pynvml()
    hints = {
        nv.NVML_ERROR_LIBRARY_NOT_FOUND: (
            "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
        ),
        nv.NVML_ERROR_DRIVER_NOT_LOADED: (
            "the NVIDIA driver is not loaded (is the nvidia kernel module loaded?)"
        ),
        nv.NVML_ERROR_NO_PERMISSION: "no permission to use the GPUs (check /dev/nvidia*)",
        nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
            "NVML library and kernel driver versions differ (reload the driver or reboot)"
        ),
        nv.NVML_ERROR_GPU_IS_LOST: "a GPU is lost (fallen off the bus)",
    }
    hint = hints.get(getattr(exc, "value", None))
    if hint is not None:
        return str(hint)
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ itself calls into the library
        return type(exc).__name__


def to_gpu_error(exc: BaseException, action: str = "") -> GpuError:
    """GpuError for an NVMLError: "NVML unavailable: ..." or "NVML <action> failed: ..."."""
    text = nvml_error_text(exc)
    if action:
        return GpuError(f"NVML {action} failed: {text}")
    return GpuError(UNAVAILABLE + text)


def _pci_key(bus_id: str) -> str:
    """One spelling for "0000:18:00.0" and "00000000:18:00.0" (NVML uses both)."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):08x}:{parts[1]}:{parts[2]}"
        except ValueError:
            pass
    return bus_id.strip().lower()


@dataclass
class _Gpu:
    index: int
    uuid: str
    handle: Any
    ecc: int | None  # last volatile uncorrected ECC count; None: not supported
    lost: bool = False


class NvmlGpus:
    name = "nvml"

    def __init__(self, ecc_corrected_warn: int = 0, throttle_warn_polls: int = 0) -> None:
        nv = _pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise to_gpu_error(e) from e
        self._nv = nv
        self._open = True
        self._reported: set[str] = set()  # nvml_error details already reported
        self._suspect_lost: set[int] = set()  # GpuIsLost seen outside poll_health
        self._warnings = GpuWarnings(nv, ecc_corrected_warn, throttle_warn_polls)
        try:
            self._driver = _text(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError:
            self._driver = "unknown"
        try:
            self._gpus: dict[int, _Gpu] = {}
            for i in range(int(nv.nvmlDeviceGetCount())):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                self._gpus[i] = _Gpu(i, _text(nv.nvmlDeviceGetUUID(h)), h, self._ecc_count(h))
                self._warnings.start(i, h)
        except nv.NVMLError as e:
            self.close()
            raise to_gpu_error(e) from e
        self._events = self._register_events()

    def device_count(self) -> int:
        return len(self._gpus)

    def driver_version(self) -> str:
        return self._driver

    # ------------------------------------------------------------------ discovery

    def discover(self) -> list[GpuDevice]:
        nv = self._nv
        out = []
        for g in self._gpus.values():
            if g.lost:
                continue
            try:
                out.append(self._describe(g))
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    self._suspect_lost.add(g.index)  # poll_health reports it
                    continue
                raise to_gpu_error(e, f"discovery of GPU {g.index}") from e
        return out

    def _describe(self, g: _Gpu) -> GpuDevice:
        nv = self._nv
        h = g.handle
        try:
            minor = int(nv.nvmlDeviceGetMinorNumber(h))
        except nv.NVMLError:
            minor = -1  # not on every platform; only /dev/nvidia<minor> needs it
        mig_enabled, migs = self._mig(h)
        return GpuDevice(
            index=g.index,
            model=_text(nv.nvmlDeviceGetName(h)),
            memory_mb=int(nv.nvmlDeviceGetMemoryInfo(h).total) // MIB,
            uuid=g.uuid,
            pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(h).busId),
            minor=minor,
            mig_enabled=mig_enabled,
            mig_devices=migs,
        )

    def _mig(self, h: Any) -> tuple[bool, tuple[MigDevice, ...]]:
        nv = self._nv
        try:
            current = nv.nvmlDeviceGetMigMode(h)[0]
        except nv.NVMLError:
            return False, ()  # NotSupported: a GPU without MIG
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return False, ()
        out = []
        try:
            slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
        except nv.NVMLError:
            return True, ()
        for k in range(slots):
            try:
                m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                uuid = _text(nv.nvmlDeviceGetUUID(m))
                memory_mb = int(nv.nvmlDeviceGetMemoryInfo(m).total) // MIB
            except nv.NVMLError:
                continue  # NotFound: an empty slot
            out.append(MigDevice(k, uuid, self._mig_profile(h, m), memory_mb))
        return True, tuple(out)

    def _mig_profile(self, parent: Any, mig: Any) -> str:
        """Best effort: from the MIG device's name, else from its GPU instance profile."""
        nv = self._nv
        try:
            found = _MIG_PROFILE.search(_text(nv.nvmlDeviceGetName(mig)))
            if found:
                return found.group(1)
        except nv.NVMLError:
            pass
        try:
            gi = nv.nvmlDeviceGetGpuInstanceById(parent, nv.nvmlDeviceGetGpuInstanceId(mig))
            profile_id = nv.nvmlGpuInstanceGetInfo(gi).profileId
            for p in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(parent, p)
                except nv.NVMLError:
                    continue
                if info.id == profile_id:
                    return f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"
        except (nv.NVMLError, AttributeError):
            pass  # older drivers or pynvml without these calls
        return ""

    # ------------------------------------------------------------------ topology

    def topology(self) -> dict[tuple[int, int], str]:
        nv = self._nv
        gpus = [g for g in self._gpus.values() if not g.lost]
        keys: dict[int, str] = {}
        links: dict[int, Counter[str]] = {}
        switch_links: dict[int, int] = {}
        for g in gpus:
            try:
                keys[g.index] = _pci_key(_text(nv.nvmlDeviceGetPciInfo(g.handle).busId))
            except nv.NVMLError:
                keys[g.index] = ""
            links[g.index], switch_links[g.index] = self._nvlinks(g.handle)
        out: dict[tuple[int, int], str] = {}
        for a in gpus:
            for b in gpus:
                if a.index >= b.index:
                    continue
                n = links[a.index][keys[b.index]] if keys[b.index] else 0
                if n == 0 and switch_links[a.index] and switch_links[b.index]:
                    # Through NVSwitches every GPU reaches every other one over all its links.
                    n = min(switch_links[a.index], switch_links[b.index])
                out[(a.index, b.index)] = f"NV{n}" if n else self._pcie(a.handle, b.handle)
        return out

    def _nvlinks(self, h: Any) -> tuple[Counter[str], int]:
        """Active NVLinks of one GPU: count per remote GPU's PCI id, and links to switches."""
        nv = self._nv
        per_remote: Counter[str] = Counter()
        to_switch = 0
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                if nv.nvmlDeviceGetNvLinkState(h, link) != nv.NVML_FEATURE_ENABLED:
                    continue
                remote = _pci_key(_text(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_NotSupported):
                    break  # this GPU has no NVLink at all
                continue  # InvalidArgument: past this GPU's last link
            try:
                kind = nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
            except (nv.NVMLError, AttributeError):
                kind = nv.NVML_NVLINK_DEVICE_TYPE_GPU  # older drivers: assume a direct link
            if kind == nv.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                to_switch += 1
            else:
                per_remote[remote] += 1
        return per_remote, to_switch

    def _pcie(self, a: Any, b: Any) -> str:
        nv = self._nv
        try:
            level = int(nv.nvmlDeviceGetTopologyCommonAncestor(a, b))
        except nv.NVMLError:
            return "SYS"  # the farthest: never promise a closeness we could not see
        return TOPOLOGY_NAMES.get(level, "SYS")

    # ------------------------------------------------------------------ health

    def poll_health(self) -> list[HealthEvent]:
        if not self._open:
            return []
        out: list[HealthEvent] = []
        try:
            self._poll_lost(out)
            self._poll_events(out)
            self._poll_ecc(out)
            self._poll_warnings(out)
        except Exception as e:  # a health poll must never take noded down
            log.exception("GPU health poll failed")
            self._error(out, -1, nvml_error_text(e))
        return out

    def _poll_lost(self, out: list[HealthEvent]) -> None:
        nv = self._nv
        for g in self._gpus.values():
            if g.lost:
                continue
            if g.index in self._suspect_lost:
                self._mark_lost(out, g, "GPU is lost")
                continue
            try:
                g.handle = nv.nvmlDeviceGetHandleByUUID(g.uuid)
            except nv.NVMLError as e:
                self._mark_lost(out, g, f"no handle for {g.uuid}: {nvml_error_text(e)}")

    def _poll_events(self, out: list[HealthEvent]) -> None:
        nv = self._nv
        if self._events is None:
            return
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError_Timeout:
                return  # nothing more pending
            except nv.NVMLError as e:
                self._error(out, -1, f"event wait: {nvml_error_text(e)}")
                return
            index = self._index_of(data.device)
            kind = int(data.eventType)
            if kind & nv.nvmlEventTypeXidCriticalError:
                code = int(data.eventData)
                warning = self._warnings.xid(index, code)
                if warning is not None:
                    out.append(warning)
                elif code in APPLICATION_XIDS:
                    log.info("ignoring application XID", gpu=index, xid=code)
                else:
                    out.append(HealthEvent("xid", index, f"XID {code}"))
            elif kind & nv.nvmlEventTypeDoubleBitEccError:
                out.append(HealthEvent("ecc", index, "double-bit ECC error"))

    def _poll_ecc(self, out: list[HealthEvent]) -> None:
        nv = self._nv
        for g in self._gpus.values():
            if g.lost or g.ecc is None:
                continue
            try:
                n = int(
                    nv.nvmlDeviceGetTotalEccErrors(
                        g.handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                    )
                )
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    self._mark_lost(out, g, "GPU is lost")
                else:
                    self._error(out, g.index, f"ECC query: {nvml_error_text(e)}")
                continue
            if n > g.ecc:
                out.append(HealthEvent("ecc", g.index, f"{n - g.ecc} new uncorrectable ECC errors"))
            g.ecc = n

    def _poll_warnings(self, out: list[HealthEvent]) -> None:
        nv = self._nv
        for g in self._gpus.values():
            if g.lost:
                continue
            try:
                self._warnings.poll(g.index, g.handle, out)
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    self._mark_lost(out, g, "GPU is lost")
                else:
                    self._error(out, g.index, f"health warning query: {nvml_error_text(e)}")

    def _ecc_count(self, h: Any) -> int | None:
        nv = self._nv
        try:
            return int(
                nv.nvmlDeviceGetTotalEccErrors(
                    h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                )
            )
        except nv.NVMLError:
            return None  # NotSupported: no ECC on this GPU, or ECC turned off

    def _register_events(self) -> Any:
        nv = self._nv
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.warning("NVML events unavailable; XIDs will not be seen", error=str(e))
            return None
        wanted = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError
        for g in self._gpus.values():
            try:
                kinds = int(nv.nvmlDeviceGetSupportedEventTypes(g.handle)) & wanted
                if kinds:
                    nv.nvmlDeviceRegisterEvents(g.handle, kinds, events)
            except nv.NVMLError as e:
                log.warning("cannot watch GPU for XIDs", gpu=g.index, error=str(e))
        return events

    def _index_of(self, device: Any) -> int:
        nv = self._nv
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(device))
        except nv.NVMLError:
            return -1
        for g in self._gpus.values():
            if g.uuid == uuid:
                return g.index
        return -1

    def _mark_lost(self, out: list[HealthEvent], g: _Gpu, detail: str) -> None:
        if not g.lost:
            g.lost = True
            out.append(HealthEvent("lost", g.index, detail))

    def _error(self, out: list[HealthEvent], index: int, detail: str) -> None:
        # The first report drains the node; repeating it every poll adds nothing.
        key = f"{index}:{detail}"
        if key not in self._reported:
            self._reported.add(key)
            out.append(HealthEvent("nvml_error", index, detail))

    # ------------------------------------------------------------------ sampling

    def sample(self, indices: Sequence[int], pids: Collection[int]) -> list[GpuSample]:
        """Per-GPU utilization; memory of ``pids`` when NVML lists them, else the device's.

        If none of the pids shows up (another PID namespace, or NVML cannot list
        processes), the device's used memory stands in: GPUs are allocated whole.
        """
        nv = self._nv
        if not self._open:
            return []
        wanted = set(pids)
        out = []
        for i in indices:
            g = self._gpus.get(i)
            if g is None or g.lost:
                continue
            try:
                try:
                    util = float(nv.nvmlDeviceGetUtilizationRates(g.handle).gpu)
                except nv.NVMLError_NotSupported:
                    util = 0.0  # MIG mode has no whole-GPU utilization
                out.append(GpuSample(i, util, self._memory_used(g.handle, wanted)))
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    self._suspect_lost.add(i)
            except Exception:  # never take the sampler down
                log.exception("GPU sample failed", gpu=i)
        return out

    def _memory_used(self, h: Any, pids: set[int]) -> float:
        nv = self._nv
        if pids:
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except nv.NVMLError:
                procs = []
            mine = [p for p in procs if p.pid in pids]
            if mine:
                # usedGpuMemory is None where the driver cannot tell (e.g. WDDM).
                return sum(int(p.usedGpuMemory or 0) for p in mine) / MIB
        return float(nv.nvmlDeviceGetMemoryInfo(h).used) / MIB

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        nv = self._nv
        events = getattr(self, "_events", None)  # absent when __init__ failed early
        if events is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(events)
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
