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
        if width and value.isdigit():
            value = value.zfill(min(int(width), 10))
        return value

    return _PATTERN.sub(sub, pattern)
