"""A step an earlier noded ran here, taken over: its tasks (the supervisor's children),
their pipes (the supervisor's copies) and the session srun resumes (stream.py RESUME).

The step's output written while no noded was here waits in the tasks' pipes (a task
that fills its pipe waits too); the exits that came meanwhile are in the supervisor.
srun, whose stream broke, reconnects and proves the step's credential (kept in the
root-only spool: ctld may be away as well); then everything goes on as before. If no
srun resumes within ``RESUME_WAIT_S``, srun is gone: the step ends as when srun goes
away (its tasks killed), and its end is reported.
"""

from __future__ import annotations

import asyncio
import os

import structlog

from noded.core import stall
from noded.records import STEP_MARKER_VAR
from noded.steps import StepRunner, step_holder
from noded.takeover import StepTakeover
from noded.taskio import RunningStep, Task
from noded.tracking import JobProcesses

log = structlog.get_logger("noded")

RESUME_WAIT_S = 60.0  # srun retries for longer (heartbeat.timeout_s and more)


def take_over(runner: StepRunner, took: StepTakeover, resume_wait_s: float = RESUME_WAIT_S) -> None:
    """Make ``took`` one of ``runner``'s steps, its pipes read again, waiting for srun."""
    rec, start = took.record, took.request
    job = start.job
    timeout = stall.timeout_for(job, runner.noded.progress_timeout_s)
    running = RunningStep(job.job_id, rec.step_id, rec.run, timeout)
    running.credential = took.credential
    running.port = rec.master_port
    running.stdin_ranks = set(start.stdin_ranks)
    running.supervisor = took.supervisor
    running.since = rec.since
    running.procs = JobProcesses(-1, rec.marker, None, STEP_MARKER_VAR, uid=rec.uid)
    for info, found in zip(rec.tasks, took.tasks, strict=True):
        fds = dict(found.fds)
        if info.get("tty"):
            tty = fds.pop("tty")
            out_fds = (os.dup(tty), _ended_pipe())
        else:
            tty = -1
            out_fds = (fds.pop("out"), fds.pop("err"))
        gpus = info.get("gpus")
        running.tasks.append(
            Task(
                int(str(info["rank"])),
                found.process,
                fds.pop("gate", -1),
                found.process.exited,
                out_fds,
                tty=tty,
                progress=str(info.get("progress") or ""),
                gpus=[int(g) for g in gpus] if isinstance(gpus, list) else [],
                supervisor=took.supervisor,
                key=found.process.key,
            )
        )
        for fd in fds.values():
            os.close(fd)
    runner.supervisors.adopt(job.job_id, took.supervisor, step_holder(rec.run, rec.step_id))
    runner.steps[(job.job_id, rec.step_id)] = running
    running.warning = runner.arm_warning(job, running)
    runner.watch(running)
    running.resume_timer = runner.clock.call_later(resume_wait_s, _abandon, runner, running)
    log.info(
        "step of an earlier noded taken over: waiting for its srun",
        job_id=job.job_id,
        step_id=rec.step_id,
        tasks=len(running.tasks),
    )


def _ended_pipe() -> int:
    """The read end of a pipe nobody writes (a --pty task's stderr went to its terminal)."""
    r, w = os.pipe()
    os.close(w)
    return r


def _abandon(runner: StepRunner, running: RunningStep) -> None:
    """No srun came back for the step: it ends as when its srun goes away."""
    running.resume_timer = None
    if running.attached or running.ended.is_set():
        return
    log.warning(
        "no srun resumed the step: it ends",
        job_id=running.job_id,
        step_id=running.step_id,
    )
    task = asyncio.get_running_loop().create_task(runner.end(running))
    runner.keep(task)
