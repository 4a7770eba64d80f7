"""A job's checkpoint directory: its name, and the marker that says whose it is.

A job id alone names no job for good: a second cluster numbers its jobs from 1 too,
and so does a cluster reinstalled. So the directory is named by the cluster, the job
id (an array task's ``ARRAYID_TASK``) and the job's unique id, minted at submit and
kept across requeues and controller restarts (``Job.unique_id``):
``corral-17-9f2c1a7e4b3d2a10``. A marker file inside (``.corral-job``) holds that same
name; a directory whose marker names another one is another job's, and a job never
resumes from it (noded/checkpoints.py refuses the launch). ctld names the directory
the same way when it asks for it to be removed (ctld/core/commit.py).
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the commands' harness names directories without the wire's weight
    from corral.wire import corral_pb2 as pb

MARKER = ".corral-job"  # inside the directory: its name, as the job that owns it knows it
MARKER_MAX = 4096  # a marker longer than this is no marker of ours

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def new_unique_id() -> str:
    """A job's unique id: 64 random bits (two jobs of the same cluster and id never meet)."""
    return secrets.token_hex(8)


def job_label(job_id: int, array_job_id: int, array_task_id: int | None) -> str:
    """The job as Slurm writes it: its id, an array task's ``ARRAYID_TASK``."""
    return str(array_job_id or job_id) + (f"_{array_task_id}" if array_task_id is not None else "")


def checkpoint_name(job: pb.Job) -> str:
    """The directory's name under its root (one path component)."""
    task = job.array_task_id if job.HasField("array_task_id") else None
    return directory_name(job.cluster, job.job_id, job.array_job_id, task, job.unique_id)


def directory_name(
    cluster: str, job_id: int, array_job_id: int, array_task_id: int | None, unique_id: str
) -> str:
    """``checkpoint_name`` from the job's parts."""
    label = job_label(job_id, array_job_id, array_task_id)
    if not unique_id:  # submitted before unique ids: a requeue finds its old directory
        return label
    cluster = _UNSAFE.sub("_", cluster or "corral").lstrip(".") or "corral"
    return f"{cluster}-{label}-{_UNSAFE.sub('_', unique_id)}"


def marker_text(name: str) -> str:
    """What the marker of directory ``name`` holds."""
    return name + "\n"


def marker_owner(text: str) -> str:
    """The directory name a marker's text records ("" when it records none)."""
    first = text.split("\n", 1)[0].strip()
    return first if first and not _UNSAFE.search(first) else ""
