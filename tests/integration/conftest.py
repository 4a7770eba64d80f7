"""Fixtures of the integration tests alone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from corral.testing.images import BuiltImages, build, missing_tools, runtime_blocker
from tests.integration.realusers import Users, can_make_users, open_dir, real_users


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    """Three real users (alice, bob, op) for this test module, removed afterwards."""
    if not can_make_users():
        pytest.skip("needs root and useradd")
    with real_users() as made:
        yield made


def skip_or_fail(reason: str) -> None:
    # .ci/run installs the tools and sets the host up: there a missing piece is a failure
    if os.environ.get("CI") == "true":
        pytest.fail(f"containers cannot run here under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def images() -> Iterator[BuiltImages]:
    """The container test images (corral/testing/images.py), world-readable."""
    missing = missing_tools()
    if missing:
        skip_or_fail(f"missing {', '.join(missing)} (apt: crun fuse-overlayfs ...)")
    blocker = runtime_blocker()
    if blocker:
        skip_or_fail(blocker)
    base = open_dir("corral-images-")
    try:
        yield build(str(base / "img"))
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
