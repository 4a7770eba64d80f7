"""The Python ``make venv`` builds the venv from: one every user of the machine can run.

Run as root, ``make demo`` starts a cluster whose jobs run as their users, and their
scripts call the venv's commands (srun, scontrol): a venv made from a Python under
``/root`` (pyenv, conda; ``/root`` is mode 0700) works for root alone. So, as root, when
the ``python3`` running this is not reachable by others, the system's Python 3.11+ is
chosen instead, and said on stderr; when there is none, this says exactly what to do.
Not root: ``python3``, as before (your jobs run as you).

Prints the interpreter for the Makefile (``PYTHON ?= $(shell python3 scripts/...)``).
Standard library only.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

SYSTEM = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
MINIMUM = (3, 11)  # pyproject's requires-python


def blocked_at(path: str) -> str:
    """The first directory (or the file itself) of ``path`` that other users cannot
    search or execute, "" when there is none (every component of the path and of what
    it resolves to)."""
    for each in dict.fromkeys([path, os.path.realpath(path)]):
        parts = Path(each).parts
        for depth in range(2, len(parts) + 1):
            part = Path(*parts[:depth])
            try:
                mode = os.stat(part).st_mode
            except OSError:
                return str(part)
            if not mode & stat.S_IXOTH:
                return str(part)
    return ""


def usable(python: str) -> bool:
    """A Python of at least MINIMUM with the venv module (Debian splits it out)."""
    check = f"import sys, venv, ensurepip; sys.exit(sys.version_info < {MINIMUM!r})"
    try:
        done = subprocess.run([python, "-c", check], capture_output=True, timeout=30)
    except OSError:
        return False
    return done.returncode == 0


def choose(current: str, *, root: bool, system: tuple[str, ...] = SYSTEM) -> tuple[str, str]:
    """(the interpreter to build the venv from, a note for stderr or "")."""
    if not root:
        return "python3", ""
    blocked = blocked_at(current)
    if not blocked:
        return "python3", ""
    for candidate in system:
        if os.path.exists(candidate) and not blocked_at(candidate) and usable(candidate):
            return candidate, (
                f"make: building the venv from {candidate}: python3 ({current}) is under "
                f"{blocked}, which other users cannot enter, and their jobs run the venv's "
                "commands (srun, scontrol)"
            )
    return "python3", (
        f"make: warning: python3 ({current}) is under {blocked}, which other users cannot "
        "enter, and no system Python 3.11+ with venv was found: other users' jobs will "
        "not run the venv's commands. Install one (apt-get install python3 python3-venv) "
        "and run `rm -rf .venv && make demo` again, or run `make demo "
        "PYTHON=/path/to/a/python3.11` with one every user can run"
    )


def main() -> int:
    python, note = choose(sys.executable, root=os.geteuid() == 0)
    if note:
        print(note, file=sys.stderr)
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
