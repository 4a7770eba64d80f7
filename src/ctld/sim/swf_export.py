"""The site's history as a Standard Workload Format trace, for sharing (``corral sim
--export-swf FILE``).

Anonymised: users, accounts (SWF's groups), job names (applications) and QOSes
(queues) become numbers 1, 2, ... in the order they first appear; nothing else that
names a person or a site is written (no node names, paths, scripts, account names, uids
or gids). Partitions are numbered the same way and listed by name in the header (a
partition's name is the site's, not a person's). SWF has no GPU field: a job's
processors are its CPUs; its GPUs go into a header note's totals only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TextIO

from corral.wire import corral_pb2 as pb
from ctld.sim.history import History

# SWF status: 1 completed, 0 failed, 5 cancelled (the archive's codes)
_STATUS = {
    pb.JOB_STATE_COMPLETED: 1,
    pb.JOB_STATE_CANCELLED: 5,
}


class _Numbers:
    """1, 2, 3 ... in order of first appearance."""

    def __init__(self) -> None:
        self.seen: dict[object, int] = {}

    def __call__(self, key: object) -> int:
        if key not in self.seen:
            self.seen[key] = len(self.seen) + 1
        return self.seen[key]


def write(history: History, out: TextIO, cluster: str = "", max_procs: int = 0) -> int:
    """Write ``history``'s jobs of the window (submitted in it) as SWF; returns how many."""
    jobs = [j for j in history.jobs if history.start <= j.submit_time < history.end]
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    origin = int(jobs[0].submit_time) if jobs else int(history.start)
    users, groups, apps, queues, parts = (_Numbers() for _ in range(5))
    numbers: dict[int, int] = {}  # job id -> its SWF job number (a dependency's)
    lines = []
    gpus = 0
    for n, job in enumerate(jobs, 1):
        numbers[job.job_id] = n
        lines.append(_line(n, job, origin, users, groups, apps, queues, parts, numbers))
        gpus += job.num_gpus
    head = [
        "; Version: 2.2",
        f"; Computer: {_clean(cluster) or 'corral cluster'} (corral sim --export-swf)",
        f"; UnixStartTime: {origin}",
        f"; StartTime: {time.strftime('%a %b %d %H:%M:%S %Z %Y', time.localtime(origin))}",
        f"; MaxJobs: {len(jobs)}",
        f"; MaxRecords: {len(jobs)}",
    ]
    if max_procs:
        head.append(f"; MaxProcs: {max_procs}")
    head += [
        "; Note: users, groups, applications (job names) and queues (QOS) are anonymised: "
        "numbered in order of first appearance",
        f"; Note: processors are CPUs; GPUs are not in SWF (the jobs held {gpus} GPUs in all)",
    ]
    head += [f"; Partition: {i} {_clean(str(name))}" for name, i in parts.seen.items()]
    out.write("\n".join(head + lines) + "\n")
    return len(jobs)


def _line(
    n: int,
    job: pb.Job,
    origin: int,
    users: _Numbers,
    groups: _Numbers,
    apps: _Numbers,
    queues: _Numbers,
    parts: _Numbers,
    numbers: dict[int, int],
) -> str:
    started = job.start_time > 0
    wait = int(job.start_time - job.submit_time) if started else -1
    run = int(job.end_time - job.start_time) if started and job.end_time >= job.start_time else -1
    cpus = job.num_cpus or -1
    limit = job.time_limit_s if job.time_limit_s > 0 else -1
    mem_kb = int(job.mem_mb * 1024 / cpus) if job.mem_mb and cpus > 0 else -1
    status = _STATUS.get(job.state, 0 if job.end_time else -1)
    preceding = _preceding(job, numbers)
    fields: Iterable[int] = (
        n,
        int(job.submit_time) - origin,
        wait,
        run,
        cpus if started else -1,
        -1,  # average CPU time used
        -1,  # used memory
        cpus,
        limit,
        mem_kb,
        status,
        users(job.user),
        groups(job.account),
        apps((job.user, job.spec.name)),
        queues(job.qos or "normal"),
        parts(job.partition or (job.spec.partitions[0] if job.spec.partitions else "")),
        preceding,
        -1,  # think time
    )
    return " ".join(str(f) for f in fields)


def _preceding(job: pb.Job, numbers: dict[int, int]) -> int:
    """The SWF number of the job this one depended on (the first named), else -1."""
    if not job.spec.HasField("dependencies"):
        return -1
    for cond in job.spec.dependencies.conditions:
        for ref in cond.jobs:
            if ref.job_id in numbers:
                return numbers[ref.job_id]
    return -1


def _clean(text: str) -> str:
    return "".join(c for c in text if c.isprintable() and c not in "\r\n")[:64]
