"""Starting a step's tasks on this node (I/O only).

Each task starts as the job's user through the same gate as a batch script (its stdin
pipe is the gate: noded writes one line to release it, then srun's input follows),
with the job's marker (the batch job's tracking and a job cancel find it), a step
marker (a step cancel finds its own) and its own progress heartbeat file. Before the
first task the step's record goes to ``<spool>/state`` (records.py): a new noded or the
fence guard kills what it names.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable

import structlog

from corral.errors import LaunchError
from corral.tasks import task_gpus
from corral.wire import corral_pb2 as pb
from noded import progress, records
from noded.containers.mounts import Mount
from noded.containers.runtime import Container, Containers
from noded.env import job_umask, step_environment
from noded.spawn import Identity, identity_for, start_gated
from noded.supervisor import Supervisor
from noded.taskio import F_SETPIPE_SZ, PIPE_BYTES, RunningStep, Task, open_terminal
from noded.tracking import MARKER_VAR, PROGRESS_VAR, STEP_MARKER_VAR, JobProcesses

log = structlog.get_logger("noded")

# $1: the submitter's umask (SLURM_UMASK; "": noded's own), $2: the working directory
TASK_SHIM = (
    "read _ || exit 111; SLURM_TASK_PID=$$; export SLURM_TASK_PID; "
    '[ -z "$1" ] || umask "$1" || exit 111; '
    'cd "$2" 2>/dev/null || cd /tmp; shift 2; exec "$@"'
)
# --pty: the task (a session leader) opens its terminal, which makes it the session's
# controlling terminal: job control, and Ctrl-C from srun's keyboard as a SIGINT here
PTY_SHIM = (
    "read _ || exit 111; SLURM_TASK_PID=$$; export SLURM_TASK_PID; "
    '[ -z "$1" ] || umask "$1" || exit 111; '
    'cd "$2" 2>/dev/null || cd /tmp; pts=$3; shift 3; '
    'exec <"$pts" >"$pts" 2>&1; exec "$@"'
)


def task_key(run: int, step_id: int, rank: int) -> str:
    """A task's name in its job's supervisor."""
    return f"task.{run}.{step_id}.{rank}"


class TaskStarter:
    def __init__(
        self,
        node_name: str,
        job_marker: str,
        spool_dir: str,
        contain: Callable[[int, int], None],
        *,
        containers: Containers | None = None,
    ) -> None:
        self.node_name = node_name
        self.job_marker = job_marker  # format with job_id: the batch job's marker
        self.spool_dir = spool_dir  # "": no records, no progress files
        # puts a task (held at its gate) into its batch job's cgroup and cores, if here
        self.contain = contain
        self.containers = containers  # srun --container-image runs its tasks there

    async def start_all(
        self,
        start: pb.RunTasksRequest,
        here: pb.StepNode,
        port: int,
        running: RunningStep,
        supervisor: Supervisor,
    ) -> None:
        """Start the step's tasks here, each held at its gate until it is confined; set
        ``running.tasks`` as they start (a failure half-way leaves those found)."""
        job, step = start.job, start.step
        who = identity_for(job, self.node_name)
        job_marker = self.job_marker.format(job_id=job.job_id)
        step_marker = f"{job_marker}.{step.step_id}"
        # before any task: a spawn that fails half-way still has its started tasks found
        running.procs = JobProcesses(-1, step_marker, None, STEP_MARKER_VAR, uid=who.uid)
        running.since = time.time()
        self._record(
            records.StepState(job.job_id, step.step_id, step_marker, who.uid, running.since)
        )
        master = start.master_addr or "127.0.0.1"
        ctr = await self._container(start, who)
        for local_id, rank in enumerate(here.ranks):
            gpus = task_gpus(here, step.spec, local_id)
            env = step_environment(
                dict(start.environment),
                job,
                step,
                here,
                rank=rank,
                local_id=local_id,
                gpus=gpus,
                cluster=start.cluster,
                master_addr=master,
                master_port=port,
            )
            env[MARKER_VAR] = job_marker
            env[STEP_MARKER_VAR] = step_marker
            # its own heartbeat, never the batch script's (inherited through srun)
            beat = self._progress_file(job.job_id, step.step_id, rank, who.uid, who.gid)
            env[PROGRESS_VAR] = beat
            # plain pipes read here (not asyncio's): their read ends can be drained to
            # empty without blocking, so the last output is never cut off
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            for fd in (out_r, err_r):
                with contextlib.suppress(OSError):  # a smaller pipe only costs speed
                    fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
            tty, stdout = -1, out_w
            mask = job_umask(env)
            argv = list(step.spec.argv)
            if ctr is not None and self.containers is not None:
                extra = [Mount(beat, beat)] if beat else []
                argv = self.containers.task_argv(
                    ctr,
                    step_id=step.step_id,
                    rank=rank,
                    argv=argv,
                    env=env,
                    cwd=start.cwd,
                    gpu_indices=list(here.gpu_indices),
                    extra=extra,
                )
            shim = [TASK_SHIM, "corral-task", mask, start.cwd or "/"]
            if rank == 0 and start.HasField("pty"):
                tty, stdout, pts = open_terminal(start.pty, who.uid if who.pw else -1)
                shim = [PTY_SHIM, "corral-task", mask, start.cwd or "/", pts]
            key = task_key(job.restart_count, step.step_id, rank)
            # the supervisor keeps a copy of each of noded's ends: a task never sees
            # its reader go while noded restarts (output stays in the pipe meanwhile)
            keep = {"out": out_r, "err": err_r} if tty < 0 else {"tty": tty}
            try:
                proc, write_fd = await start_gated(
                    supervisor,
                    key,
                    [*shim, *argv],
                    who=who,
                    env=env,
                    stdout=stdout,
                    stderr=err_w,
                    what=f"task {rank}",
                    keep=keep,
                    keep_gate=True,  # srun's input follows the gate
                )
            except BaseException:
                os.close(out_r)
                os.close(err_r)
                if tty >= 0:
                    os.close(tty)
                raise
            finally:
                os.close(out_w)
                os.close(err_w)
                if stdout != out_w:
                    os.close(stdout)  # the task has its own now
            if tty >= 0:  # its output comes from the terminal; the pipe only ends
                os.close(out_r)
                out_r = os.dup(tty)
            try:
                self.contain(job.job_id, proc.pid)
            except OSError as exc:
                log.warning("step task not confined", job_id=job.job_id, error=str(exc))
            task = Task(
                rank,
                proc,
                write_fd,
                proc.exited,
                (out_r, err_r),
                tty=tty,
                progress=beat,
                gpus=list(gpus),
                supervisor=supervisor,
                key=key,
            )
            running.tasks.append(task)
            with contextlib.suppress(OSError):
                os.write(write_fd, b"go\n")
        log.info(
            "step started",
            job_id=job.job_id,
            step_id=step.step_id,
            node=self.node_name,
            tasks=len(running.tasks),
            master=f"{master}:{port}",
        )

    async def _container(self, start: pb.RunTasksRequest, who: Identity) -> Container | None:
        """The step's container here (srun --container-image), prepared before its first
        task; None without one. ContainerError fails the step with its reason."""
        spec = start.step.spec
        if not spec.HasField("container") or not (spec.container.image or spec.container.name):
            return None
        if self.containers is None:
            raise LaunchError("containers are not enabled on this node")
        return await self.containers.prepare(
            start.job, spec.container, who, step_id=start.step.step_id, cwd=start.cwd
        )

    def started(self, start: pb.RunTasksRequest, running: RunningStep) -> None:
        """Every task here is past its gate: the step's record says what a later noded
        needs to take it over (its supervisor, its tasks, the request and credential)."""
        if not self.spool_dir or running.supervisor is None or running.procs is None:
            return
        job, step = start.job, start.step
        tasks: list[dict[str, object]] = [
            {"rank": t.rank, "progress": t.progress, "gpus": t.gpus, "tty": t.tty >= 0}
            for t in running.tasks
        ]
        try:
            name = records.step_request_name(job.job_id, step.step_id)
            records.save_request(self.spool_dir, name, start.SerializeToString())
        except OSError as exc:
            log.error("step request not saved in the spool", job_id=job.job_id, error=str(exc))
            return
        self._record(
            records.StepState(
                job.job_id,
                step.step_id,
                running.procs.marker,
                running.procs.uid if running.procs.uid is not None else -1,
                running.since,
                supervisor_pid=running.supervisor.pid,
                supervisor_path=running.supervisor.path,
                run=job.restart_count,
                started=True,
                master_port=running.port,
                tasks=tasks,
            )
        )

    def _record(self, state: records.StepState) -> None:
        """The step's record (records.py): a new noded or the fence guard kills its tasks."""
        if not self.spool_dir:
            return
        try:
            records.save_step(self.spool_dir, state)
        except OSError as exc:
            log.error("step record not saved in the spool", job_id=state.job_id, error=str(exc))

    def _progress_file(self, job_id: int, step_id: int, rank: int, uid: int, gid: int) -> str:
        if not self.spool_dir:
            return ""
        try:
            path = progress.step_file(self.spool_dir, job_id, step_id, rank)
        except OSError as exc:
            log.warning("progress directory not made", error=str(exc))
            return ""
        return path if progress.make_file(path, uid, gid) else ""
