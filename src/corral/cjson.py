"""JSON for the short-lived commands through CPython's C accelerator, without ``json``.

``import json`` compiles regular expressions at import (``json.scanner``,
``json.decoder``), so it brings ``re`` and with it ``enum``, ``functools`` and
``collections``: about 10 ms of every command's start-up. ``_json`` (the accelerator
the json package itself uses) does the same work without them. ``dumps`` gives what
``json.dumps(obj, separators=(",", ":"))`` gives; ``loads`` the values
``json.loads`` gives, and a ValueError for what json.loads refuses.
"""

from __future__ import annotations

from _json import encode_basestring_ascii, make_encoder, make_scanner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"  # JSON's whitespace: nothing else may surround the value
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What the C scanner reads from json.JSONDecoder: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


_scan = make_scanner(_Context())  # type: ignore[arg-type]  # a duck-typed context


def _default(obj: object) -> object:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


def dumps(obj: object) -> str:
    """Compact JSON, ASCII only (non-ASCII as \\u escapes), as json.dumps with
    ``separators=(",", ":")``."""
    if isinstance(obj, str):
        return encode_basestring_ascii(obj)
    # a fresh marker dict per call: a circular structure is a ValueError, as in json
    encode = make_encoder({}, _default, encode_basestring_ascii, None, ":", ",", False, False, True)
    return "".join(encode(obj, 0))


def loads(data: str | bytes | bytearray) -> Any:
    """One JSON value, surrounded by nothing but whitespace (bytes: UTF-8)."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "surrogatepass")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value
