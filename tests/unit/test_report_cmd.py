"""corral report: GPU-hours per account per day from a ReportUsage reply, as a table and
as a chart (matplotlib, the optional extra ``plot``: CI installs it, so there this test
never skips)."""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Iterator

import pytest

from client.report import format_table, per_day, plot
from corral.errors import CorralError
from corral.slurmfmt import day_bounds

DAY0 = 1796083200.0  # 2026-12-01T00:00:00Z
H = 3600.0


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


BOUNDS = [DAY0, DAY0 + 24 * H, DAY0 + 48 * H, DAY0 + 60 * H]
REPLY = {
    "cluster": "lab",
    "records": [
        {"account": "physics", "user": "a", "bucket": 0, "tresS": {"gres/gpu": 9 * H, "cpu": 1}},
        {"account": "physics", "user": "b", "bucket": 0, "tresS": {"gres/gpu": 3 * H}},
        {"account": "bio", "user": "c", "bucket": 2, "tresS": {"gres/gpu": 1.5 * H}},
        {"account": "bio", "user": "c", "bucket": 1, "tresS": {"cpu": 5 * H}},  # no GPUs
    ],
}


def test_days_are_local_midnights_then_the_end() -> None:
    assert day_bounds(DAY0 + 5 * H, DAY0 + 60 * H) == BOUNDS
    assert day_bounds(DAY0 + H, DAY0 + 2 * H) == [DAY0, DAY0 + 2 * H]


def test_table_of_gpu_hours() -> None:
    table = per_day(REPLY, BOUNDS, "gres/gpu")
    assert table == {"bio": [0.0, 0.0, 1.5], "physics": [12.0, 0.0, 0.0]}
    assert format_table(table, BOUNDS, "gres/gpu") == (
        "Day        Account            GPU-hours\n"
        "2026-12-01 physics                12.00\n"
        "2026-12-03 bio                     1.50\n"
        "total                             13.50\n"
    )


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but matplotlib (the 'plot' extra) is missing: .ci/run installs it")
        pytest.skip("matplotlib not installed: pip install -e '.[plot]'")


def test_plot_draws_a_png(tmp_path: pathlib.Path) -> None:
    _need_matplotlib()
    out = tmp_path / "gpu.png"
    plot(per_day(REPLY, BOUNDS, "gres/gpu"), BOUNDS, "gres/gpu", str(out), "lab")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(CorralError, match="cannot write"):
        plot({}, BOUNDS, "gres/gpu", str(tmp_path / "no" / "such" / "dir.png"), "lab")


def test_without_the_extra_the_message_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    with pytest.raises(CorralError, match=r"optional extra 'plot': pip install 'corral\[plot\]'"):
        plot({}, BOUNDS, "gres/gpu", "x.png", "lab")
