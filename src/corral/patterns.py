"""Slurm's filename patterns for ``-o``/``-e``/``-i``: %j %x %u %N %A %a %n %t %s %%.

Parsed by hand, not with ``re``: srun imports this at every start-up.
"""

from __future__ import annotations

# what may follow "%" and its optional width (an ASCII letter, or "%")
_ESCAPES = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz%")


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
    the task id ("4294967294" for a plain job is Slurm's; corral prints 0); %j is the
    job's own id (an array task's own, not the master's) and %J is "jobid.stepid" for
    a step ("128.0") and the job id alone for the batch script.
    """
    values: dict[str, str] = {
        "j": str(job_id),
        "J": str(job_id) if step == "batch" else f"{job_id}.{step}",
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

    out: list[str] = []
    i, end = 0, len(pattern)
    while (start := pattern.find("%", i)) >= 0:  # %[width]X
        out.append(pattern[i:start])
        k = start + 1
        while k < end and pattern[k].isdecimal():
            k += 1
        key = pattern[k] if k < end else ""
        if key not in _ESCAPES:  # not an escape: the "%" stays, as written
            out.append("%")
            i = start + 1
            continue
        width = pattern[start + 1 : k]
        value = values.get(key)
        if value is None:
            value = pattern[start : k + 1]  # an unknown escape is left as written
        elif width and key == "J":  # the width pads the job id, not ".stepid"
            head, dot, tail = value.partition(".")
            value = head.zfill(min(int(width), 10)) + dot + tail
        elif width and value.isdecimal():
            value = value.zfill(min(int(width), 10))
        out.append(value)
        i = k + 1
    out.append(pattern[i:])
    return "".join(out)


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
