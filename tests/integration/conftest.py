"""Fixtures of the integration tests alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.realusers import Users, can_make_users, real_users


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    """Three real users (alice, bob, op) for this test module, removed afterwards."""
    if not can_make_users():
        pytest.skip("needs root and useradd")
    with real_users() as made:
        yield made
