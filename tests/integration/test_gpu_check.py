"""scripts/gpu_check.py, the check anyone with a GPU node runs, on fake GPUs here: every
step that needs no real GPU runs through the real daemons and commands (issue 26)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(400)


@pytest.mark.skipif(os.geteuid() != 0, reason="the check runs as root (cgroups, jobs' users)")
def test_the_gpu_check_passes_on_fake_gpus(tmp_path: pathlib.Path) -> None:
    where = ["--state-dir", str(tmp_path / "gc"), "--keep-logs", str(tmp_path / "logs")]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--gpus", "fake", *where],
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = [line for line in proc.stdout.splitlines() if line.startswith("PASS ")]
    assert len(passed) == 10, proc.stdout
    assert "every step passed" in proc.stdout
    assert (tmp_path / "logs" / "ctld.log").exists()
