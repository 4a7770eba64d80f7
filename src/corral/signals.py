"""Signal names and numbers without the signal module.

``import signal`` builds an enum of every signal at import (``enum``, with
``functools`` and ``collections``: ~4 ms of a command's start-up). Turning a name into
its number needs only the constants of ``_signal``, the C module underneath it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time

_signal = __import__("_signal")  # no type stubs: its constants are read as ints below

NSIG: int = _signal.NSIG
SIGKILL: int = _signal.SIGKILL
SIGINT: int = _signal.SIGINT
SIGTERM: int = _signal.SIGTERM
SIGHUP: int = _signal.SIGHUP
SIGQUIT: int = _signal.SIGQUIT
SIGUSR1: int = _signal.SIGUSR1
SIGUSR2: int = _signal.SIGUSR2
SIGWINCH: int = _signal.SIGWINCH

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Handler = Callable[[int, Any], Any] | int | None


def set_handler(sig: int, handler: Handler) -> Handler:
    """signal.signal without its enums: the previous handler (SIG_DFL/SIG_IGN as ints,
    which this takes back as they are)."""
    previous: Handler = _signal.signal(sig, handler)
    return previous


def set_wakeup_fd(fd: int) -> int:
    """signal.set_wakeup_fd(fd, warn_on_full_buffer=False): each signal's number is
    written to ``fd`` (-1: none); the previous one."""
    previous: int = _signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    return previous


def name(sig: int) -> str:
    """``SIGTERM`` for 15, as signal.Signals names it (only when a task was signalled:
    the signal module is imported then, not at start-up)."""
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"Signal {sig}"


def number(name: str) -> int | None:
    """The number of a signal name as signal.Signals has it (``SIGUSR1``, and aliases
    such as ``SIGIOT``); None for any other name."""
    if not name.startswith("SIG") or name.startswith("SIG_") or not name.isupper():
        return None
    value = getattr(_signal, name, None)
    return value if isinstance(value, int) else None
