"""Starting batch scripts and ending them: one session and process group per job.

The script runs as the job's user (when noded is root) in its working directory,
with stdout/stderr in the files its -o/-e patterns name. When the script ends, or
the job is cancelled, the whole process group goes (SIGTERM, then SIGKILL after
kill_wait). Tracking descendants that leave the group (setsid daemons) with
cgroups is the noded-hardening issue's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from corral.errors import CorralError
from corral.patterns import batch_output_paths, expand_pattern
from corral.wire import corral_pb2 as pb
from noded.env import batch_environment

log = structlog.get_logger("noded")


class LaunchError(CorralError):
    """The job could not be started on this node (reported to ctld as launch failed)."""


@dataclass
class RunningJob:
    job_id: int
    process: asyncio.subprocess.Process
    pgid: int
    started: float
    cancel_requested: bool = False
    kill_task: asyncio.Task[None] | None = field(default=None, repr=False)


Report = Callable[[pb.JobStatusUpdate], None]


class Launcher:
    def __init__(self, node_name: str, spool_dir: str, report: Report) -> None:
        self.node_name = node_name
        self.spool_dir = spool_dir
        self.report = report
        self.jobs: dict[int, RunningJob] = {}
        self._waiters: set[asyncio.Task[None]] = set()
        os.makedirs(spool_dir, mode=0o755, exist_ok=True)

    def running_job_ids(self) -> list[int]:
        return sorted(self.jobs)

    # ------------------------------------------------------------ launch

    async def launch(self, job: pb.Job, cluster: str) -> None:
        if job.job_id in self.jobs:
            return  # a retried LaunchJob: it is already running
        try:
            running = await self._start(job, cluster)
        except LaunchError as exc:
            log.warning("launch failed", job_id=job.job_id, node=self.node_name, error=str(exc))
            self.report(
                pb.JobStatusUpdate(
                    job_id=job.job_id,
                    kind=pb.JobStatusUpdate.KIND_LAUNCH_FAILED,
                    time=time.time(),
                    detail=str(exc),
                )
            )
            return
        self.jobs[job.job_id] = running
        task = asyncio.create_task(self._wait(running))
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)

    def _identity(self, job: pb.Job) -> tuple[pwd.struct_passwd | None, list[int]]:
        """The account to run as; None means 'as noded itself'."""
        me = os.getuid()
        if me != 0:
            if job.uid != me:
                raise LaunchError(
                    f"noded runs as uid {me} and cannot start jobs of uid {job.uid} ({job.user})"
                )
            return None, []
        try:
            pw = pwd.getpwuid(job.uid)
        except KeyError:
            raise LaunchError(
                f"user {job.user} (uid {job.uid}) is unknown on node {self.node_name}"
            ) from None
        if job.uid == 0:
            return None, []
        groups = os.getgrouplist(pw.pw_name, job.gid or pw.pw_gid)
        return pw, groups

    async def _start(self, job: pb.Job, cluster: str) -> RunningJob:
        spec = job.spec
        pw, groups = self._identity(job)
        uid = pw.pw_uid if pw else os.getuid()
        gid = (job.gid or pw.pw_gid) if pw else os.getgid()
        job_dir = os.path.join(self.spool_dir, f"job{job.job_id:08d}")
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        script_path = os.path.join(job_dir, "script")
        with open(script_path, "w") as fh:
            fh.write(spec.script)
        os.chmod(script_path, 0o700)
        if pw is not None:
            os.chown(job_dir, uid, gid)
            os.chown(script_path, uid, gid)

        # ctld expands the paths once (it knows array ids); older ctlds did not send them
        out_path, err_path = job.stdout_path, job.stderr_path
        if not out_path:
            out_path, err_path = batch_output_paths(
                job_id=job.job_id,
                job_name=spec.name,
                user=job.user,
                node=self.node_name,
                work_dir=spec.work_dir,
                stdout_pattern=spec.stdout_pattern,
                stderr_pattern=spec.stderr_pattern,
            )
        in_path = os.devnull
        if spec.stdin_path:
            in_path = expand_pattern(
                spec.stdin_path,
                job_id=job.job_id,
                job_name=spec.name,
                user=job.user,
                node=self.node_name,
            )
            if not os.path.isabs(in_path):
                in_path = os.path.join(spec.work_dir, in_path)
        fds: list[int] = []
        try:
            append = spec.open_mode == "append"
            out_fd = self._open_output(out_path, uid, gid, pw is not None, append)
            fds.append(out_fd)
            err_fd = out_fd
            if err_path != out_path:
                err_fd = self._open_output(err_path, uid, gid, pw is not None, append)
                fds.append(err_fd)
            try:
                in_fd = os.open(in_path, os.O_RDONLY)
            except OSError as exc:
                raise LaunchError(f"cannot open input {in_path}: {exc.strerror}") from None
            fds.append(in_fd)
            cwd = spec.work_dir if os.path.isdir(spec.work_dir) else "/tmp"
            if cwd != spec.work_dir:
                os.write(
                    err_fd,
                    f"slurmstepd: error: couldn't chdir to `{spec.work_dir}': "
                    "No such file or directory: going to /tmp instead\n".encode(),
                )
            env = batch_environment(job, self.node_name, cluster)
            try:
                proc = await asyncio.create_subprocess_exec(
                    script_path,
                    *spec.argv,
                    stdin=in_fd,
                    stdout=out_fd,
                    stderr=err_fd,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    user=uid if pw else None,
                    group=gid if pw else None,
                    extra_groups=groups if pw else None,
                )
            except OSError as exc:
                raise LaunchError(f"cannot execute the batch script: {exc.strerror}") from None
        finally:
            for fd in fds:
                os.close(fd)
        log.info(
            "job started",
            job_id=job.job_id,
            node=self.node_name,
            pid=proc.pid,
            user=job.user,
            stdout=out_path,
        )
        return RunningJob(job.job_id, proc, proc.pid, time.time())

    @staticmethod
    def _open_output(path: str, uid: int, gid: int, chown: bool, append: bool) -> int:
        mode = os.O_APPEND if append else os.O_TRUNC
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise LaunchError(f"cannot open output file {path}: {exc.strerror}") from None
        if chown:
            os.fchown(fd, uid, gid)
        return fd

    async def _wait(self, running: RunningJob) -> None:
        rc = await running.process.wait()
        # the script is gone; whatever it left in its process group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.pgid, signal.SIGKILL)
        if running.kill_task is not None:
            running.kill_task.cancel()
        self.jobs.pop(running.job_id, None)
        exit_code, exit_signal = (0, -rc) if rc < 0 else (rc, 0)
        log.info(
            "job exited",
            job_id=running.job_id,
            node=self.node_name,
            exit_code=exit_code,
            signal=exit_signal,
        )
        self.report(
            pb.JobStatusUpdate(
                job_id=running.job_id,
                kind=pb.JobStatusUpdate.KIND_EXITED,
                time=time.time(),
                exit_code=exit_code,
                exit_signal=exit_signal,
                signalled_by_request=running.cancel_requested and exit_signal != 0,
            )
        )
        job_dir = os.path.join(self.spool_dir, f"job{running.job_id:08d}")
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(job_dir, "script"))
            os.rmdir(job_dir)

    # ------------------------------------------------------------ signals

    def signal(self, req: pb.SignalJobRequest) -> bool:
        running = self.jobs.get(req.job_id)
        if running is None:
            return False
        if req.terminate:
            running.cancel_requested = True
            self._killpg(running, signal.SIGCONT)
            self._killpg(running, signal.SIGTERM)
            if running.kill_task is None:
                running.kill_task = asyncio.create_task(self._kill_after(running, req.kill_wait_s))
            return True
        sig = req.signal
        if not 0 < sig < signal.NSIG:
            raise LaunchError(f"invalid signal {sig}")
        if req.batch_only:
            with contextlib.suppress(ProcessLookupError):
                os.kill(running.process.pid, sig)
        else:
            self._killpg(running, sig)
        return True

    @staticmethod
    def _killpg(running: RunningJob, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.pgid, sig)

    async def _kill_after(self, running: RunningJob, wait_s: float) -> None:
        await asyncio.sleep(max(wait_s, 0.0))
        self._killpg(running, signal.SIGKILL)

    async def shutdown(self, kill_wait_s: float) -> None:
        """Stop every job (node shutdown): SIGTERM, then SIGKILL after kill_wait."""
        for running in list(self.jobs.values()):
            self.signal(
                pb.SignalJobRequest(job_id=running.job_id, terminate=True, kill_wait_s=kill_wait_s)
            )
        if self._waiters:
            await asyncio.wait(set(self._waiters), timeout=kill_wait_s + 5)
