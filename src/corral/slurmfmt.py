"""Slurm's time, duration and size formats, parsed and printed exactly as Slurm does.

Durations are whole seconds; -1 means UNLIMITED. Timestamps are UTC epoch seconds
inside corral and local time (``YYYY-MM-DDTHH:MM:SS``) when printed, as Slurm prints.
Standard library only: the commands import this on every call.
"""

from __future__ import annotations

import re
import time as _time

from corral.errors import InvalidOption

UNLIMITED = -1
_UNLIMITED_WORDS = {"-1", "infinite", "unlimited"}


def parse_duration(text: str, *, what: str = "time limit") -> int:
    """Slurm's time formats to seconds.

    Accepted: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``, and
    ``UNLIMITED``/``INFINITE``/``-1``. Slurm rounds to whole minutes; corral keeps
    the seconds (a stricter limit is never looser than asked).
    """
    s = text.strip()
    if s.lower() in _UNLIMITED_WORDS:
        return UNLIMITED
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        raise InvalidOption(f"Invalid {what} specification: {text!r}")
    days_s, a, b, c = m.groups()
    days = int(days_s) if days_s else 0
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days_s is not None:
        # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = ([*nums, 0, 0])[:3]
    elif len(nums) == 1:
        hours, minutes, seconds = 0, nums[0], 0
    elif len(nums) == 2:
        hours, minutes, seconds = 0, nums[0], nums[1]
    else:
        hours, minutes, seconds = nums
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total > 366 * 86400 * 100:
        raise InvalidOption(f"Invalid {what} specification: {text!r} (too large)")
    return total


def format_duration(seconds: float | int) -> str:
    """squeue's TIME/TIME_LIMIT format: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    if seconds < 0:
        return "UNLIMITED"
    total = int(seconds)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_elapsed(seconds: float | int) -> str:
    """sacct's Elapsed/Timelimit format: ``HH:MM:SS`` or ``D-HH:MM:SS``."""
    if seconds < 0:
        return "UNLIMITED"
    total = int(seconds)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def format_timestamp(epoch: float, *, unknown: str = "Unknown") -> str:
    """Slurm's timestamp: local ``YYYY-MM-DDTHH:MM:SS``; 0 prints ``unknown``."""
    if not epoch:
        return unknown
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(epoch))


_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_size_mb(text: str, *, what: str = "memory") -> int:
    """``--mem`` sizes to MiB: a number with an optional K/M/G/T suffix (default M)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt]?)[Bb]?", text.strip())
    if not m:
        raise InvalidOption(f"Invalid {what} specification: {text!r}")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    mb = int(value) if value == int(value) else int(value) + 1
    if mb > 1 << 40:
        raise InvalidOption(f"Invalid {what} specification: {text!r} (too large)")
    return mb


def format_size_mb(mb: int) -> str:
    """TRES memory as Slurm prints it: ``500M``, ``16G``, ``1.50T``."""
    if mb >= 1024 * 1024 and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T"
    if mb >= 1024 and mb % 1024 == 0:
        return f"{mb // 1024}G"
    if mb >= 1024:
        return f"{mb / 1024:.2f}G"
    return f"{mb}M"


_REL = re.compile(r"now\+(\d+)(seconds?|minutes?|hours?|days?|weeks?)?", re.IGNORECASE)
_REL_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_timestamp(text: str, *, now: float, what: str = "begin time") -> float:
    """``--begin`` style times: ``now``, ``now+N[units]``, ``HH:MM[:SS]``,
    ``YYYY-MM-DD[THH:MM[:SS]]``, ``midnight``, ``noon``, ``tomorrow``."""
    s = text.strip()
    low = s.lower()
    if low == "now":
        return now
    m = _REL.fullmatch(s)
    if m:
        unit = (m.group(2) or "s")[0].lower()
        return now + int(m.group(1)) * _REL_UNIT[unit]
    lt = _time.localtime(now)
    day_start = _time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    if low in ("today", "midnight", "noon", "teatime", "tomorrow"):
        offset = {
            "today": 0,
            "midnight": 86400,
            "noon": 12 * 3600,
            "teatime": 16 * 3600,
            "tomorrow": 86400,
        }[low]
        t = day_start + offset
        return t + 86400 if low in ("noon", "teatime") and t <= now else t
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", s)
    if m:
        t = day_start + int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
        return t + 86400 if t <= now else t
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{1,2}):(\d{2})(?::(\d{2}))?)?", s)
    if m:
        y, mo, d, hh, mm, ss = (int(x) if x else 0 for x in m.groups())
        try:
            return _time.mktime((y, mo, d, hh, mm, ss, 0, 0, -1))
        except (OverflowError, ValueError) as exc:
            raise InvalidOption(f"Invalid {what} specification: {text!r}") from exc
    raise InvalidOption(f"Invalid {what} specification: {text!r}")


def compress_counts(counts: list[int]) -> str:
    """Slurm's run-length form: [4, 4, 2] -> '4(x2),2'."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        run = j - i + 1
        out.append(f"{counts[i]}(x{run})" if run > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)
