import pytest

from corral.errors import InvalidOption
from corral.slurmfmt import (
    UNLIMITED,
    format_duration,
    format_elapsed,
    format_size_mb,
    parse_duration,
    parse_size_mb,
    parse_timestamp,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10", 600),
        ("10:30", 630),
        ("1:00:00", 3600),
        ("2-0", 2 * 86400),
        ("1-2:30", 86400 + 2 * 3600 + 30 * 60),
        ("1-02:03:04", 86400 + 7384),
        ("UNLIMITED", UNLIMITED),
        ("infinite", UNLIMITED),
        ("-1", UNLIMITED),
    ],
)
def test_parse_duration_all_slurm_forms(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "abc", "1:2:3:4", "1-", "-5", "1.5"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(InvalidOption, match="Invalid time limit"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "squeue", "sacct"),
    [
        (5, "0:05", "00:00:05"),
        (3725, "1:02:05", "01:02:05"),
        (90061, "1-01:01:01", "1-01:01:01"),
        (UNLIMITED, "UNLIMITED", "UNLIMITED"),
    ],
)
def test_format_durations(seconds: int, squeue: str, sacct: str) -> None:
    assert format_duration(seconds) == squeue
    assert format_elapsed(seconds) == sacct


@pytest.mark.parametrize(
    ("text", "mb"), [("100", 100), ("2G", 2048), ("1T", 1024 * 1024), ("512K", 1), ("1.5G", 1536)]
)
def test_sizes(text: str, mb: int) -> None:
    assert parse_size_mb(text) == mb


def test_size_rejects_garbage() -> None:
    with pytest.raises(InvalidOption, match="memory"):
        parse_size_mb("lots")


def test_format_size() -> None:
    assert format_size_mb(500) == "500M"
    assert format_size_mb(16384) == "16G"


def test_timestamps_relative_and_absolute() -> None:
    now = 1_700_000_000.0
    assert parse_timestamp("now", now=now) == now
    assert parse_timestamp("now+1hour", now=now) == now + 3600
    assert parse_timestamp("now+90", now=now) == now + 90
    assert parse_timestamp("2030-01-02T03:04:05", now=now) > now
    with pytest.raises(InvalidOption):
        parse_timestamp("yesterday-ish", now=now)
