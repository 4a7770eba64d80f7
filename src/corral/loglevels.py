"""The log level words the daemons take (``--log-level``, ``controller.log_level``,
``noded.log_level``): Slurm's SlurmctldDebug/SlurmdDebug words and Python's, as
logging's numbers. Standard library free, so the config's check costs the commands
nothing (corral/log.py, which imports structlog, applies them)."""

from __future__ import annotations

DEBUG, INFO, WARNING, ERROR, CRITICAL = 10, 20, 30, 40, 50  # logging's own numbers

LEVELS = {
    "quiet": CRITICAL + 10,
    "fatal": CRITICAL,
    "critical": CRITICAL,
    "error": ERROR,
    "warning": WARNING,
    "info": INFO,
    "verbose": INFO,
    "debug": DEBUG,
    "debug2": DEBUG,
    "debug3": DEBUG,
    "debug4": DEBUG,
    "debug5": DEBUG,
}


def level_of(name: str) -> int:
    """A level word (``info``, ``debug``, Slurm's ``verbose``...) as a logging level."""
    try:
        return LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"{name!r} is not a log level ({', '.join(LEVELS)})") from None
