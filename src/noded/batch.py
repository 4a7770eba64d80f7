"""How a batch script is started, and what is left to do once it ended: I/O only.

``BatchStarter.start`` is the launch path the launcher takes for a ``Spawn``: the
job's directory and script, its environment, the checkpoint directory and progress
file, its cgroup, the gated spawn as the user, and its confinement (cgroup and cores)
before the gate opens. A container (sbatch --container-image, noded/containers/)
changes only what the gated shim execs (crun, which runs the script in the container),
so confinement, signals and reaping stay the same; another launch path is another
object with the same ``start``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Protocol

import structlog

from corral.config import NodedConfig
from corral.errors import LaunchError
from corral.wire import corral_pb2 as pb
from noded import checkpoints, jobdir, progress, spool
from noded.cgroups import CgroupManager, CgroupUnavailable, JobCgroup
from noded.containers.mounts import Mount
from noded.containers.runtime import Containers
from noded.env import batch_environment, job_umask
from noded.gpu import GpuBackend, GpuDevice
from noded.limits import CoreAllocator
from noded.running import RunningJob
from noded.spawn import (
    Gated,
    Identity,
    batch_key,
    identity_for,
    resolve_files,
    spawn_gated,
    write_script,
)
from noded.supervisor import JobSupervisors
from noded.tracking import MARKER_VAR, PROGRESS_VAR, JobProcesses

log = structlog.get_logger("noded")

REAP_TIMEOUT_S = 10.0
HOLDER = "batch"  # the batch run's hold on its job's supervisor (JobSupervisors)


class LaunchPath(Protocol):
    async def start(self, running: RunningJob) -> None:
        """Start the run's batch script: set ``running.process`` and ``running.procs``
        (and ``running.cgroup`` when it has one), or raise LaunchError (nothing of the
        job left running)."""


class BatchStarter:
    """The batch script as the user, in a session of its own, through the gated shim."""

    def __init__(
        self,
        node_name: str,
        spool_dir: str,
        config: NodedConfig,
        *,
        cgroups: CgroupManager | None = None,
        gpus: GpuBackend | None = None,
        gpu_devices: list[GpuDevice] | None = None,
        cores: CoreAllocator | None = None,
        containers: Containers | None = None,
        supervisors: JobSupervisors | None = None,
    ) -> None:
        self.node_name = node_name
        self.supervisors = supervisors or JobSupervisors(spool_dir)
        self.spool_dir = spool_dir
        self.config = config
        self.cgroups = cgroups
        self.gpus = gpus
        self.gpu_devices = gpu_devices or []
        self.cores = cores or CoreAllocator()
        self.containers = containers

    async def start(self, running: RunningJob) -> None:
        job, spec = running.job, running.job.spec
        job_dir = spool.job_dir(self.spool_dir, job.job_id)
        who = identity_for(job, self.node_name)
        files = resolve_files(job, self.node_name)
        script = write_script(job, job_dir, who)
        env = batch_environment(
            job,
            self.node_name,
            running.cluster,
            pw=who.pw,
            default_path=self.config.default_path,
            checkpoint_root=self.config.checkpoint_dir,
        )
        # made under the operator's root; the default, in the user's submit dir, is theirs
        await asyncio.to_thread(
            checkpoints.prepare,
            env["CORRAL_CHECKPOINT_DIR"],
            who.uid,
            who.gid,
            make=bool(self.config.checkpoint_dir),
        )
        running.checkpoint_dir = env["CORRAL_CHECKPOINT_DIR"]
        path = os.path.join(job_dir, "progress")
        running.progress_file = path if progress.make_file(path, who.uid, who.gid) else ""
        env[PROGRESS_VAR] = running.progress_file
        env[MARKER_VAR] = running.marker
        argv = [script, *spec.argv]
        if spec.HasField("container") and (spec.container.image or spec.container.name):
            argv = await self._in_container(running, who, argv, env, files.workdir)
        running.cgroup = self._make_cgroup(running)
        supervisor = await self.supervisors.take(job.job_id, HOLDER)
        running.supervisor = supervisor
        gated = await spawn_gated(
            supervisor,
            batch_key(job.restart_count),
            argv,
            who=who,
            env=env,
            files=files,
            # a requeued run continues the first run's output (Slurm's rule)
            append=spec.open_mode == "append" or job.restart_count > 0,
            umask=job_umask(env),
        )
        try:
            self._contain(running, gated)
        except OSError as exc:
            gated.discard()  # the shim exits at the closed gate without running anything
            await gated.process.wait()
            log.warning("confine failed", rc=gated.process.returncode, exc_info=True)
            raise LaunchError(f"cannot confine the job: {exc.strerror or exc}") from None
        await gated.open()
        running.process = gated.process
        running.procs = JobProcesses(gated.process.pid, running.marker, running.cgroup, uid=who.uid)
        log.info(
            "job started",
            job_id=job.job_id,
            node=self.node_name,
            pid=gated.process.pid,
            supervisor=supervisor.pid,
            user=job.user,
            uid=who.uid,
            cgroup=bool(running.cgroup),
            stdout=files.stdout,
        )

    async def _in_container(
        self, running: RunningJob, who: Identity, argv: list[str], env: dict[str, str], cwd: str
    ) -> list[str]:
        """sbatch --container-image: the batch script runs in the container (Pyxis's
        sbatch support), the script and the progress file bound in at their paths."""
        if self.containers is None:
            raise LaunchError("containers are not enabled on this node")
        spec = running.job.spec.container
        ctr = await self.containers.prepare(running.job, spec, who, step_id=-1, cwd=cwd)
        extra = [Mount(argv[0], argv[0], readonly=True)]
        if running.progress_file:
            extra.append(Mount(running.progress_file, running.progress_file))
        return self.containers.task_argv(
            ctr,
            step_id=-1,
            rank=0,
            argv=argv,
            env=env,
            cwd=cwd,
            gpu_indices=list(running.alloc.gpu_indices),
            extra=extra,
        )

    def _make_cgroup(self, running: RunningJob) -> JobCgroup | None:
        if self.cgroups is None:
            return None
        cgroup = None
        try:
            cgroup = self.cgroups.create(running.job_id)
            if running.mem_limit_kb:
                cgroup.set_memory_limit(running.mem_limit_kb * 1024)
            if self.gpus is not None and self.gpus.name == "nvml":
                given = set(running.alloc.gpu_indices)
                others = [g.minor for g in self.gpu_devices if g.index not in given]
                cgroup.deny_gpus([m for m in others if m >= 0])
            return cgroup
        except (OSError, CgroupUnavailable) as exc:
            log.warning(
                "no cgroup for the job: psutil monitoring instead",
                job_id=running.job_id,
                error=str(exc),
            )
            if cgroup is not None:
                cgroup.try_remove()
            return None

    def _contain(self, running: RunningJob, gated: Gated) -> None:
        pid = gated.process.pid
        if running.cgroup is not None:
            running.cgroup.add(pid)
        cores = self.cores.take(running.job_id, running.alloc.cpus or 1)
        os.sched_setaffinity(pid, cores)


async def reap(running: RunningJob) -> None:
    """The batch shell is gone; whatever it left behind goes too (bounded)."""
    procs = running.procs
    if procs is None:
        return
    deadline = time.monotonic() + REAP_TIMEOUT_S
    while procs.alive():
        procs.signal_all(signal.SIGKILL)
        if time.monotonic() > deadline:
            log.error(
                "job processes survive SIGKILL",
                job_id=running.job_id,
                pids=sorted(procs.alive()),
            )
            break
        await asyncio.sleep(0.02)  # the kernel delivers SIGKILL asynchronously


def usage_of(running: RunningJob) -> pb.JobUsage:
    """What the run used: the samples' memory and GPU figures, the cgroup's CPU time
    (else the samples')."""
    user, system = running.usage.cpu_seconds()
    if running.cgroup is not None:
        measured = running.cgroup.cpu_seconds()
        if measured is not None:
            user, system = measured
    return pb.JobUsage(
        max_rss_kb=running.usage.max_rss_kb,
        ave_rss_kb=running.usage.ave_rss_kb,
        user_cpu_s=user,
        system_cpu_s=system,
        gpu_util_max=running.gpu.util_max,
        gpu_util_mean=running.gpu.util_mean,
        gpu_mem_max_mb=running.gpu.mem_max_mb,
        gpu_mem_mean_mb=running.gpu.mem_mean_mb,
        samples=running.usage.samples,
    )


def notice(job: pb.Job, node: str, why: str) -> None:
    """slurmstepd's line at the end of the job's stderr, which scripts and people grep
    for: ``slurmstepd-NODE: error: *** JOB N ON NODE CANCELLED AT time [DUE TO TIME
    LIMIT] ***`` (22.05 names its node after ``slurmstepd``).
    noded is root: it appends only to a regular file of the job's user, never through a
    link, and never creates one (jobdir.append_to_users_file)."""
    files = resolve_files(job, node)
    path = os.path.join(files.workdir, files.stderr)  # an absolute stderr stays as is
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    line = (
        f"slurmstepd-{node}: error: *** JOB {job.job_id} ON {node} CANCELLED AT {stamp}{why} ***\n"
    )
    jobdir.append_to_users_file(path, job.uid, line)


async def remove_cgroup(running: RunningJob) -> None:
    cgroup = running.cgroup
    if cgroup is None:
        return
    deadline = time.monotonic() + 10.0
    while not cgroup.try_remove():
        if time.monotonic() > deadline:
            log.warning("job cgroup not removed", job_id=running.job_id)
            break
        await asyncio.sleep(0.02)  # the kernel finishes tearing dead tasks down


def job_uid(job: pb.Job) -> int:
    """The uid the job's processes will run as (spawn.identity_for's answer)."""
    return job.uid if os.geteuid() == 0 else os.getuid()
