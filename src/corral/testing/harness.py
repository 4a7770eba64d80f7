"""What every test cluster offers, in either mode: the typed client, job look-ups,
waiting for a state, and the one ``wait_for``.

``LocalCluster`` (real ctld and noded processes, cluster.py) and ``InProcessCluster``
(ctld's real store and state machine in this process, a recording dispatcher and a
manual clock, inprocess.py) both implement ``client()`` and ``settle()``; the helpers
here are written once on top of them, so a test reads the same in both modes.

Standard library only (plus corral.api): importing it starts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from corral.api import Controller
from corral.checkpoints import directory_name

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "the condition",
    *,
    interval: float = 0.02,
    tick: Callable[[], object] | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail after
    ``timeout`` seconds. ``tick`` runs before each poll (an in-process cluster's
    ``settle``: time and the scheduler move only when the test moves them)."""
    deadline = time.monotonic() + timeout
    while True:
        if tick is not None:
            tick()
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Harness:
    """The helper API both kinds of test cluster share."""

    def client(self) -> Controller:
        """The typed Controller client of this cluster."""
        raise NotImplementedError

    def settle(self) -> None:
        """Let the cluster make progress before a poll (real processes: nothing to do)."""

    def job(self, job_id: int | str) -> dict[str, Any]:
        """One job as GetJobs returns it (proto3 JSON, with its events)."""
        reply = self.client().get_jobs({"filter": {"jobIds": [str(job_id)]}, "withEvents": True})
        jobs = reply.get("jobs", [])
        if not jobs:
            raise AssertionError(f"job {job_id} is unknown to the controller")
        return dict(jobs[0])

    def checkpoint_name(self, job_id: int | str) -> str:
        """The job's checkpoint directory's name under its root (corral/checkpoints.py)."""
        job = self.job(job_id)
        task = job.get("arrayTaskId")
        return directory_name(
            job.get("cluster", ""),
            int(job["jobId"]),
            int(job.get("arrayJobId", 0)),
            None if task is None else int(task),
            job.get("uniqueId", ""),
        )

    def state(self, job_id: int | str) -> str:
        """``PENDING``, ``RUNNING``, ... of one job."""
        return str(self.job(job_id).get("state", "")).removeprefix("JOB_STATE_")

    def wait_state(self, job_id: int | str, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the job is in one of ``states`` (``"RUNNING"``, ...); return it."""
        wanted = {f"JOB_STATE_{s}" for s in states}

        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job.get("state") in wanted else None

        return wait_for(reached, timeout, f"job {job_id} to reach {states}", tick=self.settle)

    def submit(self, script: str = "#!/bin/sh\ntrue\n", **spec: Any) -> str:
        """Submit a job spec (proto3 JSON keys) as the current user; its id."""
        full = {"name": "test", "script": script, "workDir": "/tmp", **spec}
        return str(self.client().submit_job({"spec": full})["jobId"])  # type: ignore[typeddict-item]


__all__ = ["Harness", "wait_for"]
