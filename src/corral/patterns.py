"""Slurm's filename patterns for ``-o``/``-e``/``-i``: %j %x %u %N %A %a %n %t %s %%."""

from __future__ import annotations

import re

_PATTERN = re.compile(r"%(\d*)([A-Za-z%])")


def expand_pattern(
    pattern: str,
    *,
    job_id: int,
    job_name: str,
    user: str,
    node: str,
    array_job_id: int = 0,
    array_task_id: int | None = None,
    node_id: int = 0,
    task_id: int = 0,
    step: str = "batch",
) -> str:
    """Replace Slurm's %-escapes in ``pattern``; unknown escapes are left as written.

    As in Slurm, %A is the array's master job id (the job id for a plain job) and %a
    the task id ("4294967294" for a plain job is Slurm's; corral prints 0).
    """
    values: dict[str, str] = {
        "j": str(job_id),
        "J": str(job_id),
        "x": job_name,
        "u": user,
        "N": node.split(".")[0],
        "A": str(array_job_id or job_id),
        "a": str(array_task_id if array_task_id is not None else 0),
        "n": str(node_id),
        "t": str(task_id),
        "s": step,
        "%": "%",
    }

    def sub(m: re.Match[str]) -> str:
        width, key = m.group(1), m.group(2)
        if key not in values:
            return m.group(0)
        value = values[key]
        if width and value.isdecimal():
            value = value.zfill(min(int(width), 10))
        return value

    return _PATTERN.sub(sub, pattern)


DEFAULT_OUTPUT = "slurm-%j.out"


def batch_output_paths(
    *,
    job_id: int,
    job_name: str,
    user: str,
    node: str,
    work_dir: str,
    stdout_pattern: str,
    stderr_pattern: str,
    array_job_id: int = 0,
    array_task_id: int | None = None,
) -> tuple[str, str]:
    """Absolute stdout and stderr paths of a batch script (stderr defaults to stdout's file;
    an array task's default is Slurm's ``slurm-%A_%a.out``)."""

    def expand(pattern: str) -> str:
        path = expand_pattern(
            pattern,
            job_id=job_id,
            job_name=job_name,
            user=user,
            node=node,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )
        return path if path.startswith("/") else f"{work_dir.rstrip('/')}/{path}"

    default = "slurm-%A_%a.out" if array_task_id is not None else DEFAULT_OUTPUT
    out = expand(stdout_pattern or default)
    return out, expand(stderr_pattern) if stderr_pattern else out
