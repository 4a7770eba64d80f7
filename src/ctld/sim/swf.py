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


class SwfError(ValueError):
    """The input is not a Standard Workload Format trace: says where and why."""


def _lines(path: Path) -> Iterator[str]:
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"  # gzip's magic, whatever the file's name
    opener = gzip.open if gzipped else open
    with opener(path, "rt", encoding="latin-1") as fh:
        yield from fh


def parse(lines: Iterator[str] | list[str], limit: int = 0, source: str = "<trace>") -> Trace:
    """Jobs with a positive run time and processor count, in submit order. A line that
    is neither a ';' header/comment nor 18 numbers is an error naming ``source`` and
    the line (a file that is not SWF must not replay as an empty trace)."""
    max_procs = max_nodes = 0
    jobs: list[TraceJob] = []
    for number, line in enumerate(lines, 1):
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
        try:
            if len(f) < 12:
                raise ValueError
            run, procs, requested = float(f[3]), int(f[4]), int(f[7])
            estimate, job_id, submit, user = float(f[8]), int(f[0]), float(f[1]), int(f[11])
        except ValueError:
            raise SwfError(
                f"{source}:{number}: not a Standard Workload Format job line (18 "
                f"whitespace-separated numbers, or a ';' comment): {text[:80]!r}"
            ) from None
        if procs <= 0:
            procs = requested
        if run <= 0 or procs <= 0:
            continue
        jobs.append(TraceJob(job_id, submit, run, procs, estimate if estimate > 0 else run, user))
        if limit and len(jobs) >= limit:
            break
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Trace(tuple(jobs), max_procs or max_nodes)


def load(path: Path, limit: int = 0) -> Trace:
    """The trace in ``path``; SwfError when it is not SWF or has no job that ran."""
    try:
        trace = parse(_lines(path), limit, str(path))
    except (EOFError, gzip.BadGzipFile) as exc:
        raise SwfError(f"{path}: a damaged gzip file: {exc}") from None
    if not trace.jobs:
        raise SwfError(
            f"{path}: no job with a run time and a processor count: not a Standard "
            "Workload Format trace, or an empty one"
        )
    return trace
