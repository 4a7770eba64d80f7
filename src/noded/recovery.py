"""Settling what an earlier noded left here and this one could not take over, before
the first registration.

What a new noded takes over (takeover.py: its supervisor still holds it) runs on.
Every process of the other jobs and steps an earlier noded left is killed, their
cgroups removed and each batch job reported ended with END_NODE_FAIL (the job
machine's FoundLost), so ctld requeues it: never relaunched beside the old copy.
Only noded's own records (records.py, in a directory only root enters) say what to
kill, and only a process whose marker, real uid and start time all agree with one is
killed; a recorded root pid is used only if it
is still the process recorded (same start time, marker and uid). A cgroup is never taken
from a record: only those under noded's own cgroup directory are emptied. The job
directories are removed without following anything in them (jobdir.py), an older
noded's user-owned ones too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

import psutil
import structlog

from noded import jobdir, progress, records, spool
from noded.cgroups import CgroupManager, JobCgroup
from noded.takeover import Takeover

log = structlog.get_logger("noded")

KILL_TIMEOUT_S = 10.0


async def recover(
    spool_dir: str,
    instance: str,
    node: str,
    cgroups: CgroupManager | None,
    lost: Callable[[int, int], object],
    took: Takeover,
) -> list[int]:
    """Kill and clean what earlier nodeds left that ``took`` did not take over, and
    tell ``lost`` (job id, run) of each such job, which reports it; returns the jobs
    reported lost."""
    spool.take_instances(spool_dir, instance)
    jobs, steps = took.lost_jobs, took.lost_steps
    kept = took.job_ids()
    claims = records.claims(jobs, steps)
    roots = [p for p in (_root(j) for j in jobs) if p is not None]
    stale = [cg for cg in cgroups.stale() if cg.job_id() not in kept] if cgroups else []
    killed = await _kill_all(claims, roots, stale)
    if not took.steps:
        progress.remove_step_files(spool_dir)  # every step of theirs is gone now
    for cg in stale:
        deadline = time.monotonic() + 5.0
        while not cg.try_remove() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    for st in jobs:
        lost(st.job_id, st.restart_count)  # its report is queued before its record goes
        records.remove_job(spool_dir, st.job_id)
    for step in steps:
        records.remove_step(spool_dir, step.job_id, step.step_id)
    _sweep_job_dirs(spool_dir, kept)
    await _let_go(took)
    markers = [b.record.marker for b in took.batches] + [s.record.marker for s in took.steps]
    spool.forget_instances(spool_dir, instance, [spool.marker_token(m) for m in markers])
    if jobs or killed or stale:
        log.info(
            "recovered from an earlier noded",
            node=node,
            jobs=len(jobs),
            processes_killed=killed,
            cgroups_removed=len(stale),
        )
    return [st.job_id for st in jobs]


def _root(st: records.JobState) -> psutil.Process | None:
    """The job's recorded root process, if it is still that process: the start time
    recorded, the job's marker and the job's uid."""
    if st.root_pid <= 0 or not st.root_created or st.uid is None:
        return None
    try:
        proc = psutil.Process(st.root_pid)
        if proc.create_time() != st.root_created:
            return None  # that pid is another process now
    except psutil.Error:
        return None
    claim = records.Claim(records.MARKER_VAR, st.marker, st.uid, st.since)
    return proc if records.claimed(proc.pid, [claim]) else None


def _tree(root: psutil.Process) -> set[int]:
    with contextlib.suppress(psutil.Error):
        if root.is_running():  # same pid and start time
            return {root.pid, *(c.pid for c in root.children(recursive=True))}
    return set()


async def _kill_all(
    claims: list[records.Claim], roots: list[psutil.Process], stale: list[JobCgroup]
) -> int:
    """SIGKILL until nothing is left (bounded); returns how many processes were found.
    A process once found stays a target while it is the same process (pid and start
    time): a child of a killed root loses its parent, not its fate."""
    seen: dict[int, float | None] = {}
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while True:
        pids = records.scan(claims)
        for root in roots:
            pids |= _tree(root)
        for cg in stale:
            pids |= cg.pids()
        pids |= {p for p, t in seen.items() if t is not None and records.start_time(p) == t}
        for pid in pids:
            seen.setdefault(pid, records.start_time(pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)  # a stopped process must die too
                os.kill(pid, signal.SIGKILL)
        alive = {p for p in pids if _running(p)}
        if not alive:
            return len(seen)
        if time.monotonic() > deadline:
            log.error("processes of an earlier noded survive SIGKILL", pids=sorted(alive))
            return len(seen)
        await asyncio.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _let_go(took: Takeover) -> None:
    """The supervisors' children that were not taken over are dead now: forgotten, and a
    supervisor with nothing taken over is closed (it exits)."""
    for sup, keys in took.supervisors.values():
        for key in [k for k in sup.processes if k not in keys]:
            await sup.forget(key)
        if not keys:
            await sup.close()


def _sweep_job_dirs(spool_dir: str, kept: set[int]) -> None:
    """Every job directory left but those of jobs taken over (none of the others' jobs
    runs now), and any half-removed one."""
    try:
        names = os.listdir(spool_dir)
    except OSError:
        return
    keep = {os.path.basename(spool.job_dir(spool_dir, job_id)) for job_id in kept}
    for name in names:
        if name in keep:
            continue
        if name.startswith(("job", ".job")):
            try:
                jobdir.discard(os.path.join(spool_dir, name))
            except OSError as exc:
                log.warning("job directory not removed", name=name, error=str(exc))
