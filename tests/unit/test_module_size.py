"""Small modules with one job each: no ctld module (core and simulator included) grows
past ~500 lines (issue 10). One that does is doing two jobs: split it by job, as
sacctmgr_ops (words, list, changes), sched/backfill (order, placing, preempting,
forecasting) and store (writer, queries) were."""

from __future__ import annotations

import pathlib

CTLD = pathlib.Path(__file__).resolve().parents[2] / "src" / "ctld"
MAX_LINES = 500


def test_every_ctld_module_is_under_500_lines() -> None:
    sizes = {str(p.relative_to(CTLD)): len(p.read_text().splitlines()) for p in CTLD.rglob("*.py")}
    assert len(sizes) > 40  # the walk found ctld
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
