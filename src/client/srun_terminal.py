"""srun's terminal and input: the window size a --pty task's terminal follows, raw mode
while a --pty step runs, which ranks read srun's stdin (--input), and rank ranges as
srun prints them."""

from __future__ import annotations

import os

from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def window() -> tuple[int, int]:
    """(rows, cols) of srun's terminal (80x24 without one)."""
    try:
        cols, rows = os.get_terminal_size(0)
    except OSError:
        cols, rows = 80, 24
    return rows, cols


def raw_terminal() -> Any:
    """--pty: srun's terminal passes every key through (Ctrl-C, Ctrl-Z reach the
    task's terminal, where they become its signals). Returns what restores it."""
    if not os.isatty(0):
        return None
    import termios
    import tty

    saved = termios.tcgetattr(0)
    tty.setraw(0)
    return lambda: termios.tcsetattr(0, termios.TCSADRAIN, saved)


def stdin_ranks(cli: dict[str, Any], ntasks: int) -> set[int]:
    """The tasks srun's stdin goes to (--input: all, none or one task; --pty: task 0)."""
    if cli.get("pty"):
        return {0}
    mode = str(cli.get("input", "all")).lower()
    if mode == "none":
        return set()
    if mode.isdigit():
        return {int(mode)}
    if mode != "all":
        raise InvalidOption(f"Invalid --input: {mode} (all, none or a task id)")
    return set(range(ntasks))


def ranges(ranks: list[int]) -> str:
    out: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)
