"""``--mail-type``: Slurm's event names, parsed as Slurm parses them (any case, commas)."""

from __future__ import annotations

from corral.errors import InvalidOption

BEGIN, END, FAIL, REQUEUE = "BEGIN", "END", "FAIL", "REQUEUE"
INVALID_DEPEND, STAGE_OUT, ARRAY_TASKS = "INVALID_DEPEND", "STAGE_OUT", "ARRAY_TASKS"
TIME_LIMIT, TIME_LIMIT_90 = "TIME_LIMIT", "TIME_LIMIT_90"
TIME_LIMIT_80, TIME_LIMIT_50 = "TIME_LIMIT_80", "TIME_LIMIT_50"
# ALL is Slurm's: not the time limits, not ARRAY_TASKS
ALL = frozenset({BEGIN, END, FAIL, INVALID_DEPEND, REQUEUE, STAGE_OUT})
KNOWN = ALL | {ARRAY_TASKS, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50}
# fraction of the time limit each warning is sent at
TIME_FRACTIONS = {TIME_LIMIT_50: 0.5, TIME_LIMIT_80: 0.8, TIME_LIMIT_90: 0.9}


def parse_mail_types(value: str) -> frozenset[str]:
    """The events ``value`` names ("" and NONE: none; NONE wins over the rest, as Slurm's)."""
    words = [w.strip().upper() for w in value.split(",") if w.strip()]
    if "NONE" in words:
        return frozenset()
    types: set[str] = set()
    for word in words:
        if word == "ALL":
            types |= ALL
        elif word in KNOWN:
            types.add(word)
        else:
            raise InvalidOption(f"--mail-type={value} invalid")
    return frozenset(types)
