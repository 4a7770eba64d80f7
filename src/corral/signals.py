"""Signal names and numbers without the signal module.

``import signal`` builds an enum of every signal at import (``enum``, with
``functools`` and ``collections``: ~4 ms of a command's start-up). Turning a name into
its number needs only the constants of ``_signal``, the C module underneath it.
"""

from __future__ import annotations

_signal = __import__("_signal")  # no type stubs: its constants are read as ints below

NSIG: int = _signal.NSIG
SIGKILL: int = _signal.SIGKILL


def number(name: str) -> int | None:
    """The number of a signal name as signal.Signals has it (``SIGUSR1``, and aliases
    such as ``SIGIOT``); None for any other name."""
    if not name.startswith("SIG") or name.startswith("SIG_") or not name.isupper():
        return None
    value = getattr(_signal, name, None)
    return value if isinstance(value, int) else None
