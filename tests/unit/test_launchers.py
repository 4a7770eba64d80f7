"""corral launchers: the Slurm commands as ``python -IS`` scripts (client/launchers.py)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from client import launchers
from corral.errors import CorralError

BIN = pathlib.Path(sys.executable).parent


def test_every_slurm_command_and_not_corral() -> None:
    names = set(launchers.commands())
    assert {"sbatch", "srun", "squeue", "sacct", "scontrol", "sinfo", "scancel"} <= names
    assert "corral" not in names


def test_a_launcher_runs_the_command_isolated_from_the_callers_python(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "bin"
    out.mkdir()
    done = subprocess.run(
        [BIN / "corral", "launchers", "--dir", str(out)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(launchers.commands())
    text = (out / "sbatch").read_text()
    assert text.startswith(f"#!{sys.executable} -IS\n")
    assert os.access(out / "sbatch", os.X_OK)
    # a PYTHONPATH that shadows corral's own package is not read (-I), as pip's script reads it
    shadow = tmp_path / "shadow" / "client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    fast = subprocess.run([out / "sbatch", "--version"], env=env, capture_output=True, text=True)
    assert fast.returncode == 0 and fast.stdout.startswith("slurm "), fast.stderr
    # the same command as pip's script: the same answer
    for name in ("squeue", "sacct"):
        ours, pips = (
            subprocess.run([d / name, "--help"], capture_output=True, text=True, timeout=60)
            for d in (out, BIN)
        )
        assert ours.returncode == pips.returncode == 0 and ours.stdout == pips.stdout != ""
    # bad input: a command of a target that is no module:function is refused by name
    with pytest.raises(CorralError, match="sbatch names 'nothing'"):
        launchers.launcher("sbatch", "nothing", sys.executable, [])
    with pytest.raises(CorralError, match="cannot be a #! line"):
        launchers.launcher("sbatch", "client.sbatch:main", "/opt/my python/bin/python", [])


def test_a_missing_directory_is_named(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [BIN / "corral", "launchers", "--dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "no such directory" in done.stderr
