"""One of each: Slurm's --signal, --array and --dependency syntax has one parser
(corral/jobsyntax.py), called at submit (sbatch for early errors, ctld once for the
job) and nowhere after; a duration has one formatter (corral/slurmfmt.py); every
command answers --help and --version through one prologue, with one version."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

from corral import __version__
from corral.slurmfmt import CPU, HOURS, SACCT, format_duration

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
BIN = pathlib.Path(sys.executable).parent

#: who may call each parser: jobsyntax itself, sbatch (its early errors), ctld's submit
#: (validate.py), and corral/jobspec.py for a job that came without its typed values
PARSERS = {
    "parse_warn_signal": {"corral/jobsyntax.py", "ctld/model/validate.py", "corral/jobspec.py"},
    "parse_array": {
        "corral/jobsyntax.py",
        "ctld/model/validate.py",
        "corral/jobspec.py",
        "client/jobopts.py",
    },
    "parse_dependency": {
        "corral/jobsyntax.py",
        "ctld/model/validate.py",
        "corral/jobspec.py",
        "client/jobopts.py",
    },
    "signal_number": {"corral/jobsyntax.py", "client/scancel.py"},
}


def _calls() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {name: set() for name in PARSERS}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("corral/wire/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in found:
                    found[name].add(rel)
    return found


def test_each_syntax_is_parsed_only_at_submit() -> None:
    for name, callers in _calls().items():
        assert callers <= PARSERS[name], f"{name} is called in {sorted(callers - PARSERS[name])}"


def test_no_duration_is_formatted_outside_slurmfmt() -> None:
    """``H:MM:SS`` by hand anywhere else is a fourth formatter again."""
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel != "corral/slurmfmt.py":
            assert ":02d}:{" not in path.read_text(), f"{rel} formats a duration by hand"


@pytest.mark.parametrize(
    ("seconds", "style", "expected"),
    [
        (3600 * 30, HOURS, "30:00:00"),
        (450, HOURS, "0:07:30"),
        (90061, SACCT, "1-01:01:01"),
        (59.9996, CPU, "01:00.000"),
        (3661.2, CPU, "01:01:01"),
        (12.3456, CPU, "00:12.346"),
        (-1, CPU, "UNLIMITED"),
    ],
)
def test_the_one_formatter_keeps_each_commands_form(
    seconds: float, style: str, expected: str
) -> None:
    assert format_duration(seconds, style) == expected


COMMANDS = [
    "sbatch",
    "srun",
    "salloc",
    "squeue",
    "sinfo",
    "sacct",
    "sacctmgr",
    "sreport",
    "scontrol",
    "scancel",
    "sprio",
    "sshare",
]


@pytest.mark.timeout(120)
def test_every_command_prints_one_version() -> None:
    lines = {
        c: subprocess.run(
            [str(BIN / c), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
        for c in COMMANDS
    }
    assert lines == dict.fromkeys(COMMANDS, f"slurm {__version__} (corral)\n")
    scontrol = subprocess.run(
        [str(BIN / "scontrol"), "version"], capture_output=True, text=True, timeout=30
    )
    assert scontrol.stdout == f"slurm {__version__} (corral)\n"
