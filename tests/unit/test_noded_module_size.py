"""Small modules with one job each, in noded too: none grows past ~500 lines (issue 23).
launcher.py and steps.py did, each mixing the job's (or step's) decisions with the I/O
that carries them out; they were split around the job and step machines."""

from __future__ import annotations

import pathlib

NODED = pathlib.Path(__file__).resolve().parents[2] / "src" / "noded"
MAX_LINES = 500


def test_every_noded_module_is_under_500_lines() -> None:
    sizes = {
        str(p.relative_to(NODED)): len(p.read_text().splitlines()) for p in NODED.rglob("*.py")
    }
    assert len(sizes) > 20  # the walk found noded
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
