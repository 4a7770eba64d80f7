"""Control characters in a user's text: found (to refuse it at submit) or replaced (where
text from an older record reaches one line: a mail header, a log field, a terminal).

A control character is one of Unicode's Cc (C0, DEL, C1: CR, LF, TAB, ESC, NEL, ...) or
a line or paragraph separator (U+2028, U+2029), which Python's ``str.splitlines`` and
some mail readers also take for a line break. Plain loops, no ``re`` or
``unicodedata``: the commands check a job name with this before they send it, and
ctld checks it again (the same code) at submit and ``scontrol update JobName=``.
"""

from __future__ import annotations

from corral.errors import InvalidOption

_SEPARATORS = frozenset("\u2028\u2029")


def is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or char in _SEPARATORS


def first_control(text: str) -> str | None:
    """The first control character of ``text``, or None."""
    for char in text:
        if is_control(char):
            return char
    return None


def describe(char: str) -> str:
    """A control character as a message names it: ``U+000A``."""
    return f"U+{ord(char):04X}"


def check_one_line(text: str, what: str) -> str:
    """``text`` when it holds no control character; else InvalidOption naming the first
    (``Invalid job name 'a\\nb': it holds a control character (U+000A)``)."""
    control = first_control(text)
    if control is not None:
        raise InvalidOption(
            f"Invalid {what} {text!r}: it holds a control character ({describe(control)})"
        )
    return text


def one_line(text: str) -> str:
    """``text`` with each control character replaced by a space: one line whatever it
    held (a mail subject never carries a header line of its own)."""
    if first_control(text) is None:
        return text
    return "".join(" " if is_control(c) else c for c in text)
