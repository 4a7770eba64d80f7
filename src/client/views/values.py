"""Reading proto3 JSON's scalars as Python's, with the defaults proto3 omits.

A reply leaves out every field at its default, carries 64-bit integers as strings and
enums by name; these turn whatever a field holds into the type its property promises,
as ``client.common``'s ``num``/``real``/``text`` always have (a value of the wrong
kind reads as the default, never as an exception in the middle of a listing).
"""

from __future__ import annotations


def as_int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        return 0


def as_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def as_str(value: object) -> str:
    return value if isinstance(value, str) else ""
