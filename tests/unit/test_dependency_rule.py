"""The architecture's dependency rule, checked by reading every import."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
STDLIB = sys.stdlib_module_names


def imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_of(package: str) -> dict[pathlib.Path, set[str]]:
    return {p: imports(p) for p in (SRC / package).rglob("*.py")}


# the in-process test harness runs ctld's state machine: the one exception, a test
# harness that no program imports (checked below)
HARNESS = SRC / "corral" / "testing" / "inprocess.py"


def test_programs_never_import_each_other() -> None:
    for package, forbidden in (
        ("ctld", ("noded", "client")),
        ("noded", ("ctld", "client")),
        ("client", ("ctld", "noded")),
        ("corral", ("ctld", "noded", "client")),
    ):
        for path, names in modules_of(package).items():
            allowed = ("ctld",) if path == HARNESS else ()
            bad = [
                n for n in names if n.split(".")[0] in forbidden and n.split(".")[0] not in allowed
            ]
            assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_no_program_imports_the_in_process_harness() -> None:
    for package in ("ctld", "noded", "client"):
        for path, names in modules_of(package).items():
            bad = [
                n
                for n in names
                if n.startswith(("corral.testing.inprocess", "corral.testing.fixtures"))
            ]
            assert not bad, f"{path.relative_to(SRC)} imports {bad}"


TESTING = SRC / "corral" / "testing"


def test_only_the_test_harness_uses_the_test_harness() -> None:
    """Nothing under src/ but corral/testing imports corral.testing (or runs one of its
    modules with ``python -m``): ``corral up`` runs corral/localcluster, which the
    harness imports, never the other way round. bench/ and tests/ may use it."""
    for path in SRC.rglob("*.py"):
        if path.is_relative_to(TESTING):
            continue
        tree = ast.parse(path.read_text(), str(path))
        used = {
            n for n in imports(path) if n == "corral.testing" or n.startswith("corral.testing.")
        }
        used |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("corral.testing")
        }
        for node in ast.walk(tree):  # from corral import testing
            if isinstance(node, ast.ImportFrom) and node.module == "corral" and node.level == 0:
                used |= {f"corral.{a.name}" for a in node.names if a.name == "testing"}
        assert not used, f"{path.relative_to(SRC)} uses {sorted(used)}"


def test_scheduling_core_is_pure() -> None:
    for path, names in modules_of("ctld/sched").items():
        for name in names:
            top = name.split(".")[0]
            # corral.reasons: the one list of pending reasons, pure standard library
            ok = (top in STDLIB and top not in ("asyncio", "time", "datetime")) or (
                name.startswith("ctld.sched") or name == "corral.reasons"
            )
            assert ok, f"{path.relative_to(SRC)} imports {name}"


def test_commands_stay_import_light() -> None:
    """The short-lived commands must not pay for grpc, protobuf, the store or structlog
    (of corral.wire only the light generated modules: the typed client surface)."""
    code = (
        "import sys, client.sbatch, client.scancel, client.corral_cmd, corral.api\n"
        "for mod in ('client.squeue', 'client.sinfo', 'client.sacct', 'client.scontrol',\n"
        "            'client.sprio', 'client.sshare'):\n"
        "    try:\n"
        "        __import__(mod)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "    ('grpc', 'google', 'sqlalchemy', 'structlog', 'psutil', 'aiohttp', 'ctld', 'noded')\n"
        "    or m.startswith('corral.wire.corral_pb2')\n"
        "    or m in ('http.client', 'urllib.request', 'email'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_generated_code_lives_only_in_wire() -> None:
    for path in SRC.rglob("*_pb2*.py"):
        assert path.parent == SRC / "corral" / "wire", path


def test_the_shared_reasons_are_pure() -> None:
    """ctld/sched may import corral.reasons only while it imports nothing but stdlib."""
    names = imports(SRC / "corral" / "reasons.py")
    assert all(n.split(".")[0] in STDLIB or n == "__future__" for n in names), names
