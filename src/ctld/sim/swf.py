"""Standard Workload Format traces (the Parallel Workloads Archive), gzipped or not."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    submit: float
    run: float  # what it really ran
    procs: int
    estimate: float  # the user's requested time: what the scheduler sees
    user: int


@dataclass(frozen=True)
class Trace:
    jobs: tuple[TraceJob, ...]
    max_procs: int  # from the header (MaxProcs, else MaxNodes), 0 if absent


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="latin-1") as fh:
        yield from fh


def parse(lines: Iterator[str] | list[str], limit: int = 0) -> Trace:
    """Jobs with a positive run time and processor count, in submit order."""
    max_procs = max_nodes = 0
    jobs: list[TraceJob] = []
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, _, value = text[1:].partition(":")
            # MaxProcs wins wherever it comes (SDSC-BLUE lists MaxNodes: 144 first)
            with contextlib.suppress(ValueError, IndexError):
                if key.strip() == "MaxProcs" and not max_procs:
                    max_procs = int(value.split()[0])
                elif key.strip() == "MaxNodes" and not max_nodes:
                    max_nodes = int(value.split()[0])
            continue
        f = text.split()
        if len(f) < 12:
            continue
        run, procs, requested = float(f[3]), int(f[4]), int(f[7])
        if procs <= 0:
            procs = requested
        estimate = float(f[8])
        if run <= 0 or procs <= 0:
            continue
        jobs.append(
            TraceJob(
                int(f[0]), float(f[1]), run, procs, estimate if estimate > 0 else run, int(f[11])
            )
        )
        if limit and len(jobs) >= limit:
            break
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Trace(tuple(jobs), max_procs or max_nodes)


def load(path: Path, limit: int = 0) -> Trace:
    return parse(_lines(path), limit)
