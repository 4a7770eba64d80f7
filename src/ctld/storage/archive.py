"""Finished jobs archived as JSON lines before the purge deletes them from the store."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from corral.wire import corral_pb2 as pb


def archive_jobs(
    directory: str,
    found: list[pb.Job],
    runs: list[pb.Job],
    to_json: Callable[[pb.Job], Any],
) -> None:
    """Append finished jobs (with their earlier runs) as JSON lines to
    ``directory/jobs-YYYY-MM.jsonl`` by the month each ended, fsynced before returning:
    the purge deletes them only after this."""
    by_job: dict[int, list[pb.Job]] = {}
    for run in runs:
        by_job.setdefault(run.job_id, []).append(run)
    lines: dict[str, list[str]] = {}
    for job in found:
        month = time.strftime("%Y-%m", time.gmtime(job.end_time))
        record = {
            "job": to_json(job),
            "earlierRuns": [to_json(r) for r in by_job.get(job.job_id, [])],
        }
        lines.setdefault(month, []).append(json.dumps(record, separators=(",", ":")))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for month, text in lines.items():
        fd = os.open(
            os.path.join(directory, f"jobs-{month}.jsonl"),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT,
            0o600,
        )
        try:
            os.write(fd, ("\n".join(text) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
