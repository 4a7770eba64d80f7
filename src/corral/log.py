"""structlog set-up for the daemons: key=value on a terminal, JSON lines under a flag.

Every line carries its component and, where they apply, job_id and node keys (the
call sites pass them), so one grep follows a job across ctld and noded logs.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def setup_logging(
    component: str, *, json: bool = False, level: str = "INFO", stream: Any = None
) -> None:
    out = stream or sys.stderr
    processors: list[Any] = [
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
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(component=component)
