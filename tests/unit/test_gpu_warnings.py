"""GPU health warnings: correctable ECC rising, sustained throttling, non-fatal XIDs
(NVML against the simulated pynvml of test_gpu; the fake backend's injected warnings)."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from corral.config import GpuConfig
from corral.config.nodes import parse_gpus
from corral.config.section import Section
from corral.errors import ConfigError
from noded.gpu import HealthEvent
from noded.gpu.fake import FakeGpus
from noded.gpu.health_warnings import THROTTLE_BITS, WARNING_XIDS
from noded.gpu.nvml import NvmlGpus
from tests.unit.test_gpu import HAVE_GPU, SimNvml

HW_THERMAL = int(pynvml.nvmlClocksEventReasonHwThermalSlowdown)
POWER_BRAKE = int(pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown)
APP_CLOCKS = int(pynvml.nvmlClocksEventReasonApplicationsClocksSetting)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimNvml:
    s = SimNvml()
    s.install(monkeypatch)
    return s


def test_throttle_bits_match_pynvml() -> None:
    assert set(THROTTLE_BITS) == {
        int(pynvml.nvmlClocksEventReasonHwSlowdown),
        int(pynvml.nvmlClocksEventReasonSwThermalSlowdown),
        HW_THERMAL,
        POWER_BRAKE,
    }


def test_correctable_ecc_rising_warns_once_per_episode(sim: SimNvml) -> None:
    assert sim.corrected is not None
    sim.corrected[1] = 5000  # errors from before noded started are the baseline
    gpus = NvmlGpus(ecc_corrected_warn=100, throttle_warn_polls=0)
    assert gpus.poll_health() == []
    sim.corrected[1] += 99  # below the limit in one poll
    assert gpus.poll_health() == []
    sim.corrected[1] += 250
    (ev,) = gpus.poll_health()
    assert ev == HealthEvent("warning", 1, "correctable ECC +250/poll")
    assert ev.reason() == "GPU health warning: GPU 1 correctable ECC +250/poll"
    sim.corrected[1] += 300  # still rising: the same episode, reported already
    assert gpus.poll_health() == []
    assert gpus.poll_health() == []  # quiet again: the episode ends
    sim.corrected[1] += 100
    assert [e.detail for e in gpus.poll_health()] == ["correctable ECC +100/poll"]


def test_sustained_throttle_warns(sim: SimNvml) -> None:
    assert sim.throttle is not None
    gpus = NvmlGpus(ecc_corrected_warn=0, throttle_warn_polls=3)
    sim.throttle[0] = APP_CLOCKS  # an application's clock setting is not a fault
    for _ in range(5):
        assert gpus.poll_health() == []
    sim.throttle[0] = HW_THERMAL | APP_CLOCKS
    assert gpus.poll_health() == [] and gpus.poll_health() == []
    sim.throttle[0] = 0  # a transient: the count starts over
    assert gpus.poll_health() == []
    sim.throttle[0] = HW_THERMAL | POWER_BRAKE
    assert gpus.poll_health() == [] and gpus.poll_health() == []
    (ev,) = gpus.poll_health()
    assert ev == HealthEvent("warning", 0, "HW thermal slowdown, HW power brake for 3 polls")
    assert ev.reason().startswith("GPU health warning: GPU 0 HW thermal")
    assert len(ev.reason()) <= 60
    assert gpus.poll_health() == []  # reported once while it lasts


def test_non_fatal_xids_warn_fatal_ones_stay_fatal(sim: SimNvml) -> None:
    gpus = NvmlGpus()
    assert set(WARNING_XIDS) == {63, 92, 94}
    sim.xid(0, 94)
    sim.xid(1, 92)
    sim.xid(1, 95)  # uncontained ECC: fatal
    sim.xid(0, 13)  # the application's own: ignored
    assert gpus.poll_health() == [
        HealthEvent("warning", 0, "XID 94 (contained ECC error)"),
        HealthEvent("warning", 1, "XID 92 (high single-bit ECC rate)"),
        HealthEvent("xid", 1, "XID 95"),
    ]


def test_not_supported_turns_a_check_off(sim: SimNvml) -> None:
    sim.corrected = None  # no ECC on this GPU model
    sim.throttle = None
    gpus = NvmlGpus(ecc_corrected_warn=1, throttle_warn_polls=1)
    assert gpus.poll_health() == [] and gpus.poll_health() == []


def test_throttle_off_when_not_supported_and_lost_gpus_skipped(sim: SimNvml) -> None:
    gpus = NvmlGpus(ecc_corrected_warn=0, throttle_warn_polls=1)
    sim.throttle = None
    gpus.poll_health()  # NotSupported: off for good, no event
    sim.throttle = {0: HW_THERMAL, 1: HW_THERMAL}
    assert gpus.poll_health() == []
    gpus = NvmlGpus(ecc_corrected_warn=0, throttle_warn_polls=1)
    sim.lost.add(1)
    events = gpus.poll_health()
    assert [(e.kind, e.gpu_index) for e in events] == [("lost", 1), ("warning", 0)]


def test_fake_backend_injects_warnings(tmp_path: Path) -> None:
    state = tmp_path / "gpus.json"
    gpus = FakeGpus(GpuConfig(backend="fake", count=2, state_file=str(state)), "n1")
    events = [
        {"kind": "warning", "gpu": 1, "detail": "correctable ECC +500/poll"},
        {"kind": "warning", "gpu": 0},
        {"kind": "warning", "gpu": 7},  # no such GPU: ignored
    ]
    state.write_text(json.dumps({"events": events}))
    assert gpus.poll_health() == [
        HealthEvent("warning", 1, "correctable ECC +500/poll"),
        HealthEvent("warning", 0, "injected"),
    ]
    assert gpus.poll_health() == []  # each entry once


def test_config_keys() -> None:
    d = parse_gpus(Section({"backend": "nvml"}, "nodes[0].gpus"))
    assert (d.ecc_corrected_warn, d.throttle_warn_polls) == (100, 6)
    raw = {"backend": "nvml", "ecc_corrected_warn": 0, "throttle_warn_polls": 3}
    c = parse_gpus(Section(raw, "nodes[0].gpus"))
    assert (c.ecc_corrected_warn, c.throttle_warn_polls) == (0, 3)
    with pytest.raises(ConfigError, match=r"nodes\[0\].gpus.throttle_warn_polls: must be >= 0"):
        parse_gpus(Section({"throttle_warn_polls": -1}, "nodes[0].gpus"))


@pytest.mark.skipif(not HAVE_GPU, reason="no GPU visible to NVML")
def test_real_nvml_warning_queries() -> None:
    # the real driver answers both queries (or NotSupported): no NVML error events
    gpus = NvmlGpus(ecc_corrected_warn=1_000_000, throttle_warn_polls=1_000)
    try:
        for _ in range(2):
            assert [e for e in gpus.poll_health() if e.kind == "nvml_error"] == []
    finally:
        gpus.close()
