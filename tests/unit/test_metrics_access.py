"""Who may scrape /metrics (ctld/telemetry/metrics_access.py): the token file's checks, as the
JWT key's, the header a scrape must carry, a token rotated without a restart, and
ctld refusing to start on a token file it could not use (ctld/daemon/preflight.py)."""

from __future__ import annotations

import os
import pathlib

import pytest

from corral.config import parse_config
from corral.errors import ConfigError
from ctld.daemon.preflight import check_metrics
from ctld.telemetry.metrics_access import MetricsAccess, read_token

TOKEN = "0123456789abcdef" * 4


def token_file(tmp_path: pathlib.Path, text: str = TOKEN + "\n", mode: int = 0o600) -> str:
    path = tmp_path / "metrics.token"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def access(path: str, **controller: object) -> MetricsAccess:
    return MetricsAccess(parse_config({"controller": {"metrics_token_file": path, **controller}}))


def test_a_scrape_needs_the_files_bearer_token(tmp_path: pathlib.Path) -> None:
    a = access(token_file(tmp_path))
    assert a.allows(f"Bearer {TOKEN}") and a.allows(f"bearer {TOKEN}")
    for header in ("", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x"):
        assert not a.allows(header), header
    assert not a.allows("Bearer é")  # not ASCII: a mismatch, no error


def test_no_token_file_refuses_every_scrape() -> None:
    a = MetricsAccess(parse_config({}))
    assert not a.allows("Bearer ") and not a.allows(f"Bearer {TOKEN}")
    assert "not set" in a.refusal
    warnings = check_metrics(parse_config({}))
    assert len(warnings) == 1 and "metrics_token_file is not set" in warnings[0]


def test_a_new_token_is_read_without_a_restart(tmp_path: pathlib.Path) -> None:
    path = token_file(tmp_path)
    a = access(path)
    assert a.allows(f"Bearer {TOKEN}")
    new = "f" * 64
    tmp = tmp_path / "new"
    tmp.write_text(new)
    tmp.chmod(0o600)
    os.replace(tmp, path)
    assert a.allows(f"Bearer {new}") and not a.allows(f"Bearer {TOKEN}")
    os.chmod(path, 0o644)  # readable by others now: no token is any good
    assert not a.allows(f"Bearer {new}")
    os.unlink(path)
    assert not a.allows(f"Bearer {new}")


@pytest.mark.parametrize(
    ("text", "mode", "why"),
    [
        (TOKEN, 0o640, "owner only"),
        (TOKEN, 0o604, "owner only"),
        ("short\n", 0o600, "shorter than 32"),
        ("a" * 20 + " " + "b" * 20, 0o600, "without spaces"),
    ],
)
def test_a_token_file_others_may_read_or_too_weak_is_refused(
    tmp_path: pathlib.Path, text: str, mode: int, why: str
) -> None:
    path = token_file(tmp_path, text, mode)
    with pytest.raises(ConfigError, match=why):
        read_token(path)
    config = parse_config({"controller": {"metrics_token_file": path}})
    with pytest.raises(ConfigError, match=r"controller\.metrics_token_file: .*openssl rand"):
        check_metrics(config)


def test_a_link_or_a_missing_file_is_no_token(tmp_path: pathlib.Path) -> None:
    real = token_file(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(str(link))
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(str(tmp_path / "missing"))
    assert read_token(real) == TOKEN.encode()


def test_the_token_file_is_an_absolute_path() -> None:
    with pytest.raises(ConfigError, match=r"controller\.metrics_token_file: an absolute path"):
        parse_config({"controller": {"metrics_token_file": "metrics.token"}})
