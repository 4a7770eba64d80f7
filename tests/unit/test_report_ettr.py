"""corral report --ettr's sums (client/report_ettr.py) over jobs as sacct reads them."""

from __future__ import annotations

import pathlib

import pytest

from client.report_ettr import format_table, sums
from client.views.job import Job


def job(user: str, first: float, end: float, *interruptions: dict[str, float]) -> Job:
    raw = {
        "user": user,
        "account": "ml",
        "partition": "gpu",
        "firstStartTime": first,
        "endTime": end,
        "interruptions": list(interruptions),
    }
    return Job(raw)  # type: ignore[arg-type]


def test_groups_add_wall_lost_and_overhead_and_skip_jobs_that_never_ran() -> None:
    jobs = [
        job("ann", 0.5, 1000.5, {"time": 500.5, "lostS": 40, "nextStart": 510.5}),
        job("ann", 100, 1100),
        job("bob", 0, 0),  # never started
    ]
    groups = sums(jobs, now=2000)
    (key,) = groups
    s = groups[key]
    assert key == ("ann", "ml", "gpu") and s.jobs == 2 and s.interruptions == 1
    assert (s.wall_s, s.lost_s, s.overhead_s) == (2000, 40, 10)
    assert s.ratio == (2000 - 50) / 2000
    table = format_table(groups).splitlines()
    assert table[0].split() == [
        "User",
        "Account",
        "Partition",
        "Jobs",
        "Interrupts",
        "Wall",
        "Lost",
        "Overhead",
        "ETTR",
    ]
    assert table[1].split() == [
        "ann",
        "ml",
        "gpu",
        "2",
        "1",
        "00:33:20",
        "00:00:40",
        "00:00:10",
        "97.5%",
    ]
    assert table[-1].split()[0] == "total"


def test_the_plot_is_drawn(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("matplotlib")
    from client.report_ettr import plot

    path = tmp_path / "ettr.png"
    plot(sums([job("ann", 1, 1001)], now=2000), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
