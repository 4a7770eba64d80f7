"""compat/releases.toml for the tests: scripts/releases.py (loaded by its path: scripts/
is no package), and what a test does when the clone lacks a release or a tool."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

_PATH = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "releases.py"
_SPEC = importlib.util.spec_from_file_location("corral_releases", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
releases = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = releases  # its dataclass looks its module up by name
_SPEC.loader.exec_module(releases)


def missing(why: str) -> None:
    """Skip the test, or fail it in CI (CI=true), where everything it needs is installed
    by .ci/run and the clone is whole."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: .ci/run must provide it)")
    pytest.skip(why)
