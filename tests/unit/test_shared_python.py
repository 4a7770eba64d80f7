"""``make venv``'s interpreter (scripts/shared_python.py): as root, one every user can run.
The whole path, with a real second user running the demo: tests/integration/test_demo_users.py."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYSTEM = "/usr/bin/python3"


def _module() -> ModuleType:
    path = ROOT / "scripts" / "shared_python.py"
    spec = importlib.util.spec_from_file_location("shared_python", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shared = _module()


@pytest.fixture
def base() -> Iterator[pathlib.Path]:
    """A directory every user can enter (pytest's own are root's, 0700), with a
    ``private/python3`` only root can reach, linked to the system's Python."""
    if shared.blocked_at(SYSTEM) or not shared.usable(SYSTEM):
        pytest.skip(f"needs {SYSTEM} 3.11+ with venv, reachable by every user")
    path = pathlib.Path(tempfile.mkdtemp(prefix="corral-python-"))
    path.chmod(0o755)
    (path / "private").mkdir(mode=0o700)
    (path / "private" / "python3").symlink_to(SYSTEM)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_python_in_a_private_directory_is_blocked_there(base: pathlib.Path) -> None:
    hidden = base / "private" / "python3"
    assert shared.blocked_at(str(hidden)) == str(base / "private")
    (base / "private").chmod(0o711)  # searchable now: what it links to decides
    assert shared.blocked_at(str(hidden)) == ""
    assert shared.blocked_at(str(base / "missing")) == str(base / "missing")


def test_root_takes_a_shared_python_or_says_what_to_do(base: pathlib.Path) -> None:
    hidden = str(base / "private" / "python3")
    assert shared.choose(hidden, root=False) == ("python3", "")  # her jobs run as her
    assert shared.choose(SYSTEM, root=True) == ("python3", "")  # reachable already
    python, note = shared.choose(hidden, root=True, system=(SYSTEM,))
    assert python == SYSTEM
    assert note.startswith(f"make: building the venv from {SYSTEM}: python3 ({hidden})")
    python, note = shared.choose(hidden, root=True, system=(str(base / "none"),))
    assert python == "python3" and "rm -rf .venv && make demo" in note
