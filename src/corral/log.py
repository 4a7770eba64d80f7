"""structlog set-up for the daemons: key=value on a terminal, JSON lines under a flag.

Every line carries its component and, where they apply, job_id and node keys (the
call sites pass them), so one grep follows a job across ctld and noded logs.

The level is a processor's, not the logger class's: loggers are cached on first use,
so a level baked into their class could not change while the daemon runs, and
``scontrol reconfigure`` changes it (``set_level``: ``controller.log_level``,
``noded.log_level``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from corral.loglevels import level_of

_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
_level = [logging.INFO]  # the one threshold, read by every line's first processor


def set_level(name: str) -> None:
    """Log lines at ``name`` and above from now on (the daemon keeps running)."""
    _level[0] = level_of(name)


def _below_level(_logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    if _METHOD_LEVELS.get(method, logging.INFO) < _level[0]:
        raise structlog.DropEvent
    return event


def setup_logging(
    component: str, *, json: bool = False, level: str = "INFO", stream: Any = None
) -> None:
    out = stream or sys.stderr
    set_level(level)
    processors: list[Any] = [
        _below_level,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    if json:
        processors.append(structlog.processors.JSONRenderer())
    else:
        # logfmt (key=value): readable on a terminal, greppable in a file, and several
        # times cheaper per line than the padded console renderer
        processors.append(
            structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "event"])
        )
    structlog.configure(
        processors=processors,
        # every level reaches the processors: ``_below_level`` filters (see above)
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(component=component)
