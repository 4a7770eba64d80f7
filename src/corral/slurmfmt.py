"""Slurm's time, duration, size and count formats, parsed and printed exactly as Slurm does.

Durations are whole seconds; -1 means UNLIMITED. Timestamps are UTC epoch seconds
inside corral and local time (``YYYY-MM-DDTHH:MM:SS``) when printed, as Slurm prints.
Standard library only, and without ``re``: the commands import this on every call,
and the formats are parsed by hand (a ``\\d`` of Slurm's patterns is
``str.isdecimal``, the same Unicode class).
"""

from __future__ import annotations

import time as _time

from corral.errors import InvalidOption, InvalidRequest

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
    days_s: str | None
    days_s, dash, clock = s.partition("-")  # [D-]N[:N[:N]]
    if not dash:
        days_s, clock = None, s
    parts = clock.split(":")
    if (
        len(parts) > 3
        or not all(p.isdecimal() for p in parts)
        or (days_s is not None and not days_s.isdecimal())
    ):
        raise InvalidOption(f"Invalid {what} specification: {text!r}")
    days = int(days_s) if days_s else 0
    nums = [int(x) for x in parts]
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


# Slurm's ways of printing a duration (format_duration's ``style``)
SQUEUE = "squeue"  # squeue's TIME/TIME_LIMIT, sinfo's: M:SS, H:MM:SS, D-HH:MM:SS
SACCT = "sacct"  # sacct's Elapsed/Timelimit, scontrol's: HH:MM:SS, D-HH:MM:SS
CPU = "cpu"  # sacct's TotalCPU/UserCPU: MM:SS.mmm under an hour, else as SACCT
HOURS = "hours"  # an sbatch -t value (corral why): H:MM:SS, hours past a day


def format_duration(seconds: float | int, style: str = SQUEUE) -> str:
    """A duration as Slurm prints it in ``style``: whole seconds (CPU: to the millisecond,
    rounded); below 0: UNLIMITED. The one duration formatter of the code base."""
    if seconds < 0:
        return "UNLIMITED"
    ms = 0
    if style == CPU:
        total, ms = divmod(round(seconds * 1000), 1000)
    else:
        total = int(seconds)
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    if style == HOURS:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if style == SACCT or (style == CPU and hours):
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if style == CPU:
        return f"{minutes:02d}:{secs:02d}.{ms:03d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_elapsed(seconds: float | int) -> str:
    """sacct's Elapsed/Timelimit format: ``HH:MM:SS`` or ``D-HH:MM:SS``."""
    return format_duration(seconds, SACCT)


def format_timestamp(epoch: float, *, unknown: str = "Unknown") -> str:
    """Slurm's timestamp: local ``YYYY-MM-DDTHH:MM:SS``; 0 prints ``unknown``."""
    if not epoch:
        return unknown
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(epoch))


_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_size_mb(text: str, *, what: str = "memory") -> int:
    """``--mem`` sizes to MiB: a number with an optional K/M/G/T suffix (default M)."""
    number = text.strip()  # N[.N][ ][K|M|G|T][B]
    if number[-1:] in ("B", "b"):
        number = number[:-1]
    unit = number[-1:] if number[-1:] in ("K", "M", "G", "T", "k", "m", "g", "t") else ""
    number = number[: len(number) - len(unit)].rstrip()
    whole, dot, fraction = number.partition(".")
    if not whole.isdecimal() or (dot and not fraction.isdecimal()):
        raise InvalidOption(f"Invalid {what} specification: {text!r}")
    value = float(number) * _UNITS[unit.upper()]
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


_REL_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_REL_WORDS = frozenset(
    ("", "second", "seconds", "minute", "minutes", "hour", "hours", "day", "days", "week", "weeks")
)


def _relative(low: str) -> tuple[int, str] | None:
    """``now+N[unit]`` (lower case): N and the unit's letter ("s" when none)."""
    if not low.startswith("now+"):
        return None
    rest = low[4:]
    digits = 0
    while digits < len(rest) and rest[digits].isdecimal():
        digits += 1
    word = rest[digits:]
    if not digits or word not in _REL_WORDS:
        return None
    return int(rest[:digits]), (word or "s")[0]


def _clock(text: str) -> tuple[int, int, int] | None:
    """``H[H]:MM[:SS]``: hours, minutes, seconds."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not 1 <= len(parts[0]) <= 2:
        return None
    if any(len(p) != 2 for p in parts[1:]) or not all(p.isdecimal() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 0


def _date(text: str) -> tuple[int, int, int, int, int, int] | None:
    """``YYYY-MM-DD[THH:MM[:SS]]``."""
    day, t, at = text.partition("T")
    ymd = day.split("-")
    if [len(p) for p in ymd] != [4, 2, 2] or not all(p.isdecimal() for p in ymd):
        return None
    clock = _clock(at) if t else (0, 0, 0)
    if clock is None:
        return None
    return int(ymd[0]), int(ymd[1]), int(ymd[2]), *clock


def parse_timestamp(text: str, *, now: float, what: str = "begin time") -> float:
    """``--begin`` style times: ``now``, ``now+N[units]``, ``HH:MM[:SS]``,
    ``YYYY-MM-DD[THH:MM[:SS]]``, ``midnight``, ``noon``, ``tomorrow``."""
    s = text.strip()
    low = s.lower()
    if low == "now":
        return now
    relative = _relative(low)
    if relative:
        count, unit = relative
        return now + count * _REL_UNIT[unit]
    day_start = local_midnight(now)
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
    clock = _clock(s)
    if clock:
        if clock[0] > 23 or clock[1] > 59 or clock[2] > 59:  # Slurm's parse_time refuses
            raise InvalidOption(f"Invalid {what} specification: {text!r}")
        t = day_start + clock[0] * 3600 + clock[1] * 60 + clock[2]
        return t + 86400 if t <= now else t
    date = _date(s)
    if date:
        y, mo, d, hh, mm, ss = date
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


# ---------------------------------------------------------------- a job's resource counts

_GPU_TYPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def parse_gres(value: str) -> tuple[str, int, int]:
    """``gpu``, ``gpu:4``, ``gpu:h100:4``, ``shard:K`` -> (type, GPUs, shards). Only gpu
    and shard GRES exist here. An unknown GRES is a refused request (exit 1, Slurm's
    controller says it), not a malformed option (255)."""
    items = [v for v in value.split(",") if v]
    gpu: tuple[str, int] | None = None
    shards = 0
    for item in items:
        parts = item.split(":")
        if parts[0] == "shard" and len(parts) <= 2:
            shards = _gres_int(parts[1], item) if len(parts) == 2 else 1
            if not shards:
                raise InvalidRequest(f"Invalid generic resource (gres) specification: {item}")
            continue
        if parts[0] != "gpu" or len(parts) > 3:
            raise InvalidRequest(f"Invalid generic resource (gres) specification: {item}")
        if len(parts) == 1:
            gpu = ("", 1)
        elif len(parts) == 2:
            gpu = ("", _gres_int(parts[1], item)) if parts[1].isdecimal() else (parts[1], 1)
        else:
            gpu = (parts[1], _gres_int(parts[2], item))
    if gpu is None and not shards:
        raise InvalidRequest(f"Invalid generic resource (gres) specification: {value}")
    gpu_type, count = gpu or ("", 0)
    return gpu_type, count, shards


def _gres_int(text: str, whole: str) -> int:
    if not text.isdecimal():
        raise InvalidRequest(f"Invalid generic resource (gres) specification: {whole}")
    return int(text)


def parse_gpus(value: str, what: str) -> tuple[str, int]:
    """``[type:]N``: the type ("" when none) and the count."""
    kind, colon, count = value.strip().rpartition(":")
    if not count.isdecimal() or (colon and not (kind and set(kind) <= _GPU_TYPE_CHARS)):
        raise InvalidOption(f"Invalid {what} specification: {value}")
    return kind, int(count)


def parse_nodes(value: str) -> tuple[int, int]:
    """-N ``N`` or ``N-M`` -> (min, max; 0: none)."""
    first, dash, last = value.strip().partition("-")  # N or N-M
    if not first.isdecimal() or (dash and not last.isdecimal()) or int(first) < 1:
        raise InvalidOption(f"Invalid node count specification: {value}")
    lo = int(first)
    hi = int(last) if dash else 0
    if hi and hi < lo:
        raise InvalidOption(f"Invalid node count specification: {value}")
    return lo, hi


def local_midnight(epoch: float, days_back: int = 0) -> float:
    """The local midnight that begins the day of ``epoch``, ``days_back`` days earlier
    (mktime normalizes the day and the DST change: sacct's, sreport's and corral
    report's days all begin here)."""
    t = _time.localtime(epoch)
    return _time.mktime((t.tm_year, t.tm_mon, t.tm_mday - days_back, 0, 0, 0, 0, 0, -1))


def day_bounds(start: float, end: float) -> list[float]:
    """Local midnights from the day of ``start`` on, then ``end``: the days of corral
    report and of the web page's usage view."""
    t = _time.localtime(start)
    bounds = [local_midnight(start)]
    day = 1
    while True:
        nxt = _time.mktime((t.tm_year, t.tm_mon, t.tm_mday + day, 0, 0, 0, 0, 0, -1))
        if nxt >= end:
            break
        bounds.append(nxt)
        day += 1
    bounds.append(end)
    return bounds
