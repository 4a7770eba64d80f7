"""Values a ctld of an older version could have stored before today's checks: a job's
stored record changed by hand, with ctld stopped meanwhile (the tests that prove a
value is also checked where it is used, not only at submit)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from corral.testing import LocalCluster
from corral.wire import corral_pb2 as pb


def rewrite_stored(c: LocalCluster, job_id: int, change: Callable[[pb.JobSpec], None]) -> None:
    """Change a job's stored spec (ctld must be stopped: it reads the store at start)."""
    with sqlite3.connect(c.state_dir / "corral.db") as conn:
        (data,) = conn.execute("SELECT data FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        job = pb.Job.FromString(data)
        change(job.spec)
        conn.execute("UPDATE jobs SET data = ? WHERE job_id = ?", (job.SerializeToString(), job_id))
