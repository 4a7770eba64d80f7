"""The opt-in progress heartbeat: a file each process of a job touches once per step.

noded makes one file per batch script and one per srun task (``$CORRAL_PROGRESS_FILE``),
owned by the job's user (made in a directory of root's: jobdir.py) and dated 1970:
untouched, it means nothing (the job did not opt in). Once touched, a file that then
stays silent for the job's stall timeout while that process's GPUs idle marks a hung
rank (stall.py's rule: the job machine applies it to the batch script, the step machine
to srun's tasks, on every node of a step, so a hung rank is named with its node wherever
it runs). This module only makes the files and reads their age.
"""

from __future__ import annotations

import contextlib
import os

import structlog

from noded.jobdir import JOB_DIR_MODE, create_for_user, discard

log = structlog.get_logger("noded")

STEPS_DIR = "progress"  # <spool>/progress/<job>.<step>.<rank>: srun tasks' files


def make_file(path: str, uid: int, gid: int) -> bool:
    """Create the heartbeat file: the user's, dated 1970 (untouched). False if not made.
    Its directory is root's (a job directory, or ``<spool>/progress``): the file is made
    afresh, never through a link, and handed over by its descriptor (jobdir.py)."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # an earlier run's, in root's own directory
        create_for_user(path, uid, gid, epoch=True)
    except OSError as exc:
        log.warning("progress file not made", path=path, error=str(exc))
        return False
    return True


def step_file(spool: str, job_id: int, step_id: int, rank: int) -> str:
    """An srun task's heartbeat file (its directory, root's, made on first use)."""
    d = os.path.join(spool, STEPS_DIR)
    if not os.path.isdir(d):
        os.makedirs(d, mode=JOB_DIR_MODE, exist_ok=True)
        os.chmod(d, JOB_DIR_MODE)  # users reach their own file by name, list nothing
    return os.path.join(d, f"{job_id}.{step_id}.{rank}")


def remove_step_files(spool: str) -> None:
    """What an earlier noded's steps left (their tasks were killed at recovery)."""
    with contextlib.suppress(OSError):
        discard(os.path.join(spool, STEPS_DIR))


def silent_for(path: str, now: float) -> float | None:
    """Seconds since the process last touched its file; None if it never did."""
    try:
        touched = os.stat(path).st_mtime
    except OSError:
        return None
    if touched <= 0:
        return None  # untouched: the job did not opt in
    return max(now - touched, 0.0)


def checkpoint_mark(path: str) -> float:
    """When a job's checkpoint directory last changed (an atomic save's rename, a new
    file, a touch of the directory itself): its last checkpoint as ETTR counts it; 0
    when there is none. ``lstat``: a link in its place is no mark."""
    if not path:
        return 0.0
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0
