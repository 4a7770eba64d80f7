"""GPU backends: fake (with injected load and faults), NVML (against a simulated pynvml)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import structlog

from corral.config import GpuConfig
from corral.errors import GpuError
from noded.gpu import GpuSample, HealthEvent, NoGpus, make_backend
from noded.gpu.fake import FakeGpus
from noded.gpu.nvml import APPLICATION_XIDS, NvmlGpus, nvml_error_text, to_gpu_error

MIB = 1024 * 1024


def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    finally:
        pynvml.nvmlShutdown()


HAVE_GPU = _nvml_works()


# ---------------------------------------------------------------------- fake backend


def _fake(tmp_path: Path, count: int = 8, topology: str = "nvlink") -> FakeGpus:
    cfg = GpuConfig(backend="fake", count=count, topology=topology)
    return FakeGpus(cfg, "node1", str(tmp_path))


def _inject(tmp_path: Path, state: dict[str, Any]) -> None:
    (tmp_path / "fake-gpus.json").write_text(json.dumps(state))


def test_fake_discover_is_stable_and_minor_is_index(tmp_path: Path) -> None:
    a = _fake(tmp_path, count=4).discover()
    b = _fake(tmp_path, count=4).discover()
    assert a == b
    assert [g.minor for g in a] == [0, 1, 2, 3]
    assert len({g.uuid for g in a}) == 4
    assert all(g.uuid.startswith("GPU-") and not g.mig_enabled for g in a)
    other = FakeGpus(GpuConfig(backend="fake", count=4), "node2", str(tmp_path)).discover()
    assert {g.uuid for g in a}.isdisjoint(g.uuid for g in other)


def test_fake_topology_nvlink_and_pcie(tmp_path: Path) -> None:
    nv = _fake(tmp_path, count=4).topology()
    assert nv == {(i, j): "NV18" for i in range(4) for j in range(i + 1, 4)}
    pcie = _fake(tmp_path, count=8, topology="pcie").topology()
    assert len(pcie) == 28
    assert pcie[(0, 3)] == "PXB"
    assert pcie[(4, 7)] == "PXB"
    assert pcie[(3, 4)] == "SYS"
    assert pcie[(0, 7)] == "SYS"


def test_fake_samples_idle_without_state_file(tmp_path: Path) -> None:
    gpus = _fake(tmp_path, count=2)
    assert gpus.sample([0, 1], [123]) == [GpuSample(0, 0.0, 0.0), GpuSample(1, 0.0, 0.0)]
    assert gpus.poll_health() == []


def test_fake_injected_load(tmp_path: Path) -> None:
    gpus = _fake(tmp_path, count=4)
    _inject(tmp_path, {"util": {"0": 85.0, "2": 30}, "memory_used_mb": {"0": 1024}})
    assert gpus.sample([0, 2, 9], []) == [GpuSample(0, 85.0, 1024.0), GpuSample(2, 30.0, 0.0)]
    _inject(tmp_path, {"util": {"0": 10.0}})  # re-read on every call
    assert gpus.sample([0], [])[0].util_pct == 10.0


def test_fake_events_are_returned_once(tmp_path: Path) -> None:
    gpus = _fake(tmp_path)
    _inject(
        tmp_path,
        {
            "events": [
                {"kind": "xid", "gpu": 3, "code": 79},
                {"kind": "ecc", "gpu": 1},
                {"kind": "nvml_error", "detail": "Unknown Error"},
            ]
        },
    )
    events = gpus.poll_health()
    assert [(e.kind, e.gpu_index) for e in events] == [("xid", 3), ("ecc", 1), ("nvml_error", -1)]
    assert [e.reason() for e in events] == [
        "GPU 3 XID 79",
        "GPU 1 uncorrectable ECC errors",
        "NVML error: Unknown Error",
    ]
    assert gpus.poll_health() == []
    _inject(
        tmp_path,
        {
            "events": [
                {"kind": "xid", "gpu": 3, "code": 79},
                {"kind": "ecc", "gpu": 1},
                {"kind": "nvml_error", "detail": "Unknown Error"},
                {"kind": "xid", "gpu": 0, "code": 48},
            ]
        },
    )
    assert gpus.poll_health() == [HealthEvent("xid", 0, "XID 48")]


def test_fake_lost_gpu_reported_once_and_not_sampled(tmp_path: Path) -> None:
    gpus = _fake(tmp_path, count=4)
    _inject(tmp_path, {"lost": [2], "util": {"1": 50.0, "2": 99.0}})
    events = gpus.poll_health()
    assert [(e.kind, e.gpu_index, e.reason()) for e in events] == [("lost", 2, "GPU 2 lost")]
    assert gpus.poll_health() == []
    assert [s.index for s in gpus.sample([1, 2, 3], [])] == [1, 3]
    _inject(tmp_path, {"lost": [2, 3]})
    assert [e.gpu_index for e in gpus.poll_health()] == [3]


def test_fake_invalid_state_is_tolerated_and_warned_once(tmp_path: Path) -> None:
    gpus = _fake(tmp_path, count=2)
    (tmp_path / "fake-gpus.json").write_text("{not json")
    with structlog.testing.capture_logs() as logs:
        assert gpus.poll_health() == []
        assert gpus.sample([0], []) == [GpuSample(0, 0.0, 0.0)]
    assert len([r for r in logs if r["log_level"] == "warning"]) == 1
    # Wrong types everywhere: ignored entry by entry, never raised.
    _inject(
        tmp_path,
        {
            "util": {"0": "busy", "x": 5, "1": True},
            "memory_used_mb": [1, 2],
            "events": [{"kind": "xid", "gpu": "3"}, 7, {"kind": "ecc", "gpu": 1}],
            "lost": "all",
        },
    )
    assert gpus.poll_health() == [HealthEvent("ecc", 1, "uncorrectable ECC errors (injected)")]
    assert gpus.sample([0, 1], []) == [GpuSample(0, 0.0, 0.0), GpuSample(1, 0.0, 0.0)]
    _inject(tmp_path, [])  # type: ignore[arg-type]
    assert gpus.poll_health() == []


def test_fake_state_file_from_config(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps({"util": {"0": 7}}))
    cfg = GpuConfig(backend="fake", count=1, state_file=str(path))
    assert FakeGpus(cfg, "n", "/nonexistent").sample([0], []) == [GpuSample(0, 7.0, 0.0)]


def test_reason_is_short() -> None:
    assert HealthEvent("lost", 1, "whatever").reason() == "GPU 1 lost"
    long = HealthEvent("nvml_error", -1, "x" * 200).reason()
    assert len(long) == 60 and long.startswith("NVML error: ")
    assert (
        HealthEvent("nvml_error", 2, "Unknown Error").reason() == "GPU 2 NVML error: Unknown Error"
    )


# ---------------------------------------------------------------------- make_backend


def test_make_backend_none_and_fake(tmp_path: Path) -> None:
    backend, why = make_backend(GpuConfig(), "n", str(tmp_path))
    assert isinstance(backend, NoGpus) and why == "none: configured"
    assert backend.discover() == [] and backend.poll_health() == []
    assert backend.sample([0], []) == [] and backend.topology() == {}
    backend, why = make_backend(GpuConfig(backend="fake", count=2), "n", str(tmp_path))
    assert isinstance(backend, FakeGpus) and why.startswith("fake:")
    assert len(backend.discover()) == 2


@pytest.mark.skipif(HAVE_GPU, reason="this machine has a working NVML")
def test_auto_without_nvml_falls_back_to_none(tmp_path: Path) -> None:
    backend, why = make_backend(GpuConfig(backend="auto"), "n", str(tmp_path))
    assert isinstance(backend, NoGpus)
    assert why.startswith("none: gpus = auto and NVML is unavailable: ")


@pytest.mark.skipif(HAVE_GPU, reason="this machine has a working NVML")
def test_explicit_nvml_without_nvml_raises(tmp_path: Path) -> None:
    with pytest.raises(GpuError, match=r"^NVML unavailable: .+"):
        make_backend(GpuConfig(backend="nvml"), "n", str(tmp_path))


def test_nvml_error_translation() -> None:
    def err(code: int) -> str:
        return str(to_gpu_error(pynvml.NVMLError(code)))

    assert err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) == (
        "NVML unavailable: libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
    )
    assert "driver is not loaded" in err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert "no permission" in err(pynvml.NVML_ERROR_NO_PERMISSION)
    assert err(pynvml.NVML_ERROR_UNKNOWN) == "NVML unavailable: Unknown Error"
    e = to_gpu_error(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), "discovery of GPU 1")
    assert str(e) == "NVML discovery of GPU 1 failed: a GPU is lost (fallen off the bus)"
    assert nvml_error_text(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == "Not Supported"


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    ],
)
def test_nvml_init_failure_names_cause(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: int, text: str
) -> None:
    def fail() -> None:
        raise pynvml.NVMLError(code)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(GpuError, match=text):
        make_backend(GpuConfig(backend="nvml"), "n", str(tmp_path))
    backend, why = make_backend(GpuConfig(backend="auto"), "n", str(tmp_path))
    assert isinstance(backend, NoGpus) and text in why


# ---------------------------------------------------------------------- simulated NVML


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass(frozen=True)
class _MigHandle:
    parent: int
    slot: int


def _nverr(code: int) -> Exception:
    return pynvml.NVMLError(code)  # type: ignore[no-any-return]


class SimNvml:
    """Two H100s: GPU 0 without MIG, GPU 1 in MIG mode with one 1g.10gb slice."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.lost: set[int] = set()
        self.ecc = dict.fromkeys(range(count), 0)
        self.corrected: dict[int, int] | None = dict.fromkeys(range(count), 0)  # None: no ECC
        self.throttle: dict[int, int] | None = dict.fromkeys(range(count), 0)  # None: no query
        self.events: list[SimpleNamespace] = []
        self.nvlinks = 4  # NVLinks between GPU 0 and GPU 1; 0: NotSupported
        self.procs: dict[int, list[SimpleNamespace]] = {
            0: [
                SimpleNamespace(pid=100, usedGpuMemory=512 * MIB),
                SimpleNamespace(pid=101, usedGpuMemory=None),
                SimpleNamespace(pid=200, usedGpuMemory=4096 * MIB),
            ]
        }
        self.shutdowns = 0
        self.wait_error: int | None = None

    def install(self, mp: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                assert hasattr(pynvml, name), name
                mp.setattr(pynvml, name, getattr(self, name))

    def _check(self, h: Any) -> int:
        index = h.parent if isinstance(h, _MigHandle) else h.index
        if index in self.lost:
            raise _nverr(pynvml.NVML_ERROR_GPU_IS_LOST)
        return int(index)

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> _Handle:
        return _Handle(i)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        index = int(uuid.rsplit("-", 1)[1])
        if index in self.lost:
            raise _nverr(pynvml.NVML_ERROR_GPU_IS_LOST)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, h: Any) -> Any:
        if isinstance(h, _MigHandle):
            return f"MIG-sim-{h.parent}-{h.slot}"
        return f"GPU-sim-{self._check(h)}".encode()  # old pynvml: bytes

    def nvmlDeviceGetName(self, h: Any) -> Any:
        if isinstance(h, _MigHandle):
            return "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> SimpleNamespace:
        if isinstance(h, _MigHandle):
            return SimpleNamespace(total=9856 * MIB, used=0)
        self._check(h)
        return SimpleNamespace(total=81559 * MIB, used=2048 * MIB)

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + h.index:02X}:00.0".encode())

    def nvmlDeviceGetMinorNumber(self, h: _Handle) -> int:
        return h.index

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        if h.index == 0:
            raise _nverr(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, slot: int) -> _MigHandle:
        if slot != 0:
            raise _nverr(pynvml.NVML_ERROR_NOT_FOUND)
        return _MigHandle(h.index, slot)

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        if not self.nvlinks:
            raise _nverr(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= 18:
            raise _nverr(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(link < self.nvlinks)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> SimpleNamespace:
        other = 1 - h.index
        return SimpleNamespace(busId=f"0000:{0x18 + other:02x}:00.0")  # the short spelling

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: _Handle, link: int) -> int:
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetTopologyCommonAncestor(self, a: _Handle, b: _Handle) -> int:
        return int(pynvml.NVML_TOPOLOGY_MULTIPLE)

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        return int(pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError)

    def nvmlDeviceRegisterEvents(self, h: _Handle, kinds: int, events: str) -> None:
        assert events == "event-set"

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never block noded
        if self.wait_error is not None:
            raise _nverr(self.wait_error)
        if not self.events:
            raise _nverr(pynvml.NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, kind: int, counter: int) -> int:
        assert counter == pynvml.NVML_VOLATILE_ECC
        if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            if self.corrected is None:
                raise _nverr(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self.corrected[self._check(h)]
        assert kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return self.ecc[self._check(h)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        if self.throttle is None:
            raise _nverr(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.throttle[self._check(h)]

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        return SimpleNamespace(gpu=[40, 90][self._check(h)], memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[SimpleNamespace]:
        return self.procs.get(self._check(h), [])

    def xid(self, gpu: int, code: int) -> None:
        self.events.append(
            SimpleNamespace(
                device=_Handle(gpu),
                eventType=pynvml.nvmlEventTypeXidCriticalError,
                eventData=code,
            )
        )


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimNvml:
    s = SimNvml()
    s.install(monkeypatch)
    return s


def test_nvml_discover(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    assert gpus.device_count() == 2 and gpus.driver_version() == "550.54.15"
    g0, g1 = gpus.discover()
    assert g0.index == 0 and g0.model == "NVIDIA H100 80GB HBM3" and g0.memory_mb == 81559
    assert g0.uuid == "GPU-sim-0" and g0.pci_bus_id == "00000000:18:00.0" and g0.minor == 0
    assert not g0.mig_enabled and g0.mig_devices == ()
    assert g1.mig_enabled and g1.minor == 1
    (mig,) = g1.mig_devices
    assert (mig.index, mig.uuid, mig.profile, mig.memory_mb) == (0, "MIG-sim-1-0", "1g.10gb", 9856)
    gpus.close()
    gpus.close()
    assert sim.shutdowns == 1


def test_nvml_topology(sim: SimNvml) -> None:
    assert NvmlGpus().topology() == {(0, 1): "NV4"}
    sim.nvlinks = 0
    assert NvmlGpus().topology() == {(0, 1): "PXB"}


def test_nvml_health_xid_ecc_lost(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    assert gpus.poll_health() == []
    assert 13 in APPLICATION_XIDS
    sim.xid(0, 13)  # an application fault: not the node's problem
    sim.xid(1, 79)
    assert gpus.poll_health() == [HealthEvent("xid", 1, "XID 79")]
    assert gpus.poll_health() == []

    sim.ecc[0] = 3
    (ecc,) = gpus.poll_health()
    assert (ecc.kind, ecc.gpu_index, ecc.reason()) == ("ecc", 0, "GPU 0 uncorrectable ECC errors")
    assert gpus.poll_health() == []  # not rising any more

    sim.lost.add(1)
    (lost,) = gpus.poll_health()
    assert (lost.kind, lost.gpu_index, lost.reason()) == ("lost", 1, "GPU 1 lost")
    assert gpus.poll_health() == []
    assert [s.index for s in gpus.sample([0, 1], [])] == [0]
    assert [g.index for g in gpus.discover()] == [0]


def test_nvml_lost_seen_while_sampling_is_reported(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    sim.lost.add(0)
    assert [s.index for s in gpus.sample([0, 1], [])] == [1]
    assert [(e.kind, e.gpu_index) for e in gpus.poll_health()] == [("lost", 0)]
    assert gpus.poll_health() == []


def test_nvml_errors_become_events_once(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    sim.wait_error = pynvml.NVML_ERROR_UNKNOWN
    (ev,) = gpus.poll_health()
    assert ev.kind == "nvml_error" and ev.reason() == "NVML error: event wait: Unknown Error"
    assert gpus.poll_health() == []


def test_nvml_sample(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    # pid 101's memory is unknown (None) and counts 0; pid 200 is not the job's.
    assert gpus.sample([0], [100, 101]) == [GpuSample(0, 40.0, 512.0)]
    # No listed pid on the GPU, or no pids at all: the device's used memory.
    assert gpus.sample([0, 1], [999]) == [GpuSample(0, 40.0, 2048.0), GpuSample(1, 90.0, 2048.0)]
    assert gpus.sample([1, 5], []) == [GpuSample(1, 90.0, 2048.0)]


def test_make_backend_auto_with_gpus(sim: SimNvml, tmp_path: Path) -> None:
    backend, why = make_backend(GpuConfig(backend="auto"), "n", str(tmp_path))
    assert backend.name == "nvml"
    assert why == "nvml: gpus = auto and NVML found 2 GPUs (driver 550.54.15)"
    backend.close()


def test_make_backend_auto_without_gpus(sim: SimNvml, tmp_path: Path) -> None:
    sim.count = 0
    backend, why = make_backend(GpuConfig(backend="auto"), "n", str(tmp_path))
    assert isinstance(backend, NoGpus) and why == "none: gpus = auto and NVML sees no GPU"
    assert sim.shutdowns == 1


# ---------------------------------------------------------------------- real hardware


@pytest.mark.skipif(not HAVE_GPU, reason="no GPU visible to NVML")
def test_real_nvml() -> None:
    gpus = NvmlGpus()
    try:
        devices = gpus.discover()
        assert devices and all(d.uuid.startswith("GPU-") and d.memory_mb > 0 for d in devices)
        assert isinstance(gpus.topology(), dict)
        assert isinstance(gpus.poll_health(), list)
        samples = gpus.sample([d.index for d in devices], [])
        assert [s.index for s in samples] == [d.index for d in devices]
        assert all(0.0 <= s.util_pct <= 100.0 for s in samples)
    finally:
        gpus.close()
