"""A job's batch script back (GetBatchScript): ``scontrol write batch_script JOBID
[FILE|-]`` and ``sacct -B/--batch-script -j JOBS``, as Slurm 21.08+ has them.

Only the job's owner and operators get it (ctld says "Invalid user id" to anyone
else, or, under private_data, that there is no such job). An array task's script is
its array's (``5_2`` asks for array 5's). The file is written as the user running
the command, so it can go only where she may write herself.
"""

from __future__ import annotations

import sys

from client.common import client
from client.fmt import Reported, parse_job_ids, split_list
from corral.errors import CorralError, InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

RULE = "-" * 80  # under sacct's "Batch Script for" line
NONE = "NONE\n"  # what sacct prints for a job without a script


def _script(job_id: str) -> str:
    reply = client().get_batch_script({"jobId": job_id})
    return reply.get("script", "")


def write_batch_script(words: Sequence[str]) -> int:
    """``scontrol write batch_script JOBID [FILE]``: to ``slurm-JOBID.sh`` by default,
    to stdout for ``-``."""
    if not words or len(words) > 2:
        raise Reported("scontrol write batch_script: give a job id and, optionally, a file")
    try:
        (job_id,) = parse_job_ids(words[0])
        script = _script(job_id)
    except (InvalidOption, ValueError):
        raise Reported("job script retrieval failed: Invalid job id specified") from None
    except CorralError as exc:
        raise Reported(f"job script retrieval failed: {exc.message}") from None
    if not script:
        raise Reported(f"job script retrieval failed: job {job_id} has no batch script")
    target = words[1] if len(words) > 1 else f"slurm-{job_id}.sh"
    if target == "-":
        sys.stdout.write(script)
        return 0
    try:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(script)
    except OSError as exc:
        raise Reported(f"failed to write batch script to {target}: {exc.strerror}") from None
    sys.stdout.write(f"batch script for job {job_id} written to {target}\n")
    return 0


def print_batch_scripts(jobs: str) -> int:
    """``sacct -B -j JOBS``: each job's script under ``Batch Script for JOB`` and a rule
    (``NONE`` for a job without one); a job not found or not hers is an error line."""
    failed = False
    for word in split_list(jobs):
        (job_id,) = parse_job_ids(word)
        try:
            script = _script(job_id)
        except CorralError as exc:
            sys.stderr.write(f"sacct: error: job {word}: {exc.message}\n")
            failed = True
            continue
        text = script if script.endswith("\n") else script + "\n"
        sys.stdout.write(f"Batch Script for {word}\n{RULE}\n{text if script else NONE}")
    return 1 if failed else 0
