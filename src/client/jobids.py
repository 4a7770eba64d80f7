"""Job-id words as ctld's job ids, for the commands that act on a job by id.

``N`` names job N (or, to ctld, each not-ended task of array N: ctld expands an
array's id itself), ``N.batch``/``N.S`` name job N, and ``N_T`` names task T of array
N, which has a job id of its own: it is looked up through GetJobs with the same filter
``squeue -j N_T`` sends (``fmt.job_filter``), so ``scontrol hold 5_1`` and
``corral why 5_1`` act on that task, never on job 5.
"""

from __future__ import annotations

from client.common import client
from client.fmt import call, job_filter, parse_job_ids, split_list
from client.views.job import Job
from corral.errors import InvalidJobId, InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def task_key(item: str) -> str | None:
    """``5_1`` (or ``5_1.batch``) as ``5_1``; None when the word names no array task."""
    base, _, task = item.split(".")[0].partition("_")
    if not task:
        return None
    if not base.isdigit() or int(base) == 0 or not task.isdigit():
        raise InvalidOption(f"Invalid job id: {item}")
    return f"{int(base)}_{int(task)}"


def task_job_ids(keys: Iterable[str], what: str) -> dict[str, str]:
    """Each ``N_T`` of ``keys`` that names a task this user may see -> its job id."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    flt = job_filter(wanted)
    try:
        reply = call(lambda: client().get_jobs({"filter": flt}), what, keep=(InvalidJobId,))
    except InvalidJobId:  # ctld's answer when no job matches: none of them is known
        return {}
    jobs = (Job(j) for j in reply.get("jobs", []))
    return {job.ref: str(job.job_id) for job in jobs if job.is_array_task and job.ref in wanted}


def resolve_job_ids(value: str | Iterable[str], what: str) -> tuple[list[str], list[str]]:
    """(ctld's ids for the words, in their order; the words naming no job: a malformed
    id, or a task that does not exist or this user may not see)."""
    words: list[tuple[str, str | None, list[str]]] = []  # (word, task key, plain ids)
    unknown: list[str] = []
    for item in split_list(value):
        try:
            key = task_key(item)
            words.append((item, key, [] if key else parse_job_ids(item)))
        except InvalidOption:
            unknown.append(item)
    found = task_job_ids((key for _, key, _ in words if key), what)
    ids: list[str] = []
    for item, key, plain in words:
        if key is None:
            ids.extend(plain)
        elif key in found:
            ids.append(found[key])
        else:
            unknown.append(item)
    return ids, unknown
