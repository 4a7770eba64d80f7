"""A batch job's life on the node: prolog, start, limits, signals, end, epilog, report.

Each job runs as its user in its own session, inside its cgroup when the host has
them (cgroups.py), with every descendant tracked (tracking.py) so that cancel,
time-out and shutdown leave nothing behind. The monitor samples memory, CPU and
GPUs every ``noded.sample_interval_s`` for accounting, the psutil memory limit and
the idle-GPU policy. How the job ended goes to ctld as one status update, after
the epilog, so the job's resources stay allocated until the node is clean again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from corral.config import IdleGpuConfig, NodedConfig
from corral.errors import CorralError, LaunchError
from corral.jobspec import warn_signal
from corral.jobsyntax import WarnSignal
from corral.wire import corral_pb2 as pb
from noded import jobdir, progress, recovery, spool
from noded.cgroups import CgroupManager, CgroupUnavailable, JobCgroup
from noded.clock import Clock, RealClock, Timer
from noded.env import batch_environment, job_umask
from noded.gpu import GpuBackend, GpuDevice
from noded.limits import CoreAllocator, GpuStats
from noded.scripts import run_script, script_environment
from noded.spawn import (
    Gated,
    identity_for,
    resolve_files,
    spawn_gated,
    write_script,
)
from noded.tracking import MARKER_VAR, PROGRESS_VAR, JobProcesses, Usage

log = structlog.get_logger("noded")

Update = pb.JobStatusUpdate
Report = Callable[[pb.JobStatusUpdate], None]
HealthSink = Callable[[str, str], None]  # (reason, detail): drain this node
REAP_TIMEOUT_S = 10.0

__all__ = ["LaunchError", "Launcher"]


@dataclass
class RunningJob:
    job: pb.Job
    cluster: str
    kill_wait_s: float
    marker: str
    alloc: pb.NodeAllocation
    process: asyncio.subprocess.Process | None = None
    procs: JobProcesses | None = None
    cgroup: JobCgroup | None = None
    cancel_requested: bool = False
    end_reason: int = Update.END_NONE
    usage: Usage = field(default_factory=Usage)
    gpu: GpuStats = field(default_factory=GpuStats)
    idle_since: float = 0.0
    idle_reported: bool = False
    timers: list[Timer] = field(default_factory=list)
    kill_task: asyncio.Task[None] | None = field(default=None, repr=False)
    fenced: bool = False  # ctld gave the job to others: killed, and nothing is reported
    gpu_utils: list[float] = field(default_factory=list)  # the last GPU sample
    progress_file: str = ""  # the opt-in progress heartbeat (CORRAL_PROGRESS_FILE)
    since: float = field(default_factory=time.time)  # taken on: before any process of it
    stall: str = ""  # who stopped making progress (detail of the END_STALLED report)

    @property
    def job_id(self) -> int:
        return self.job.job_id

    @property
    def restart_count(self) -> int:
        return self.job.restart_count

    @property
    def mem_limit_kb(self) -> int:
        return int(self.alloc.mem_mb) * 1024


class Launcher:
    def __init__(
        self,
        node_name: str,
        spool_dir: str,
        report: Report,
        *,
        noded: NodedConfig | None = None,
        idle: IdleGpuConfig | None = None,
        cgroups: CgroupManager | None = None,
        gpus: GpuBackend | None = None,
        gpu_devices: list[GpuDevice] | None = None,
        health: HealthSink | None = None,
        cores: CoreAllocator | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.node_name = node_name
        self.clock: Clock = clock or RealClock()  # timers and windows (tests: ManualClock)
        self.spool_dir = spool_dir
        self.report = report
        self.noded = noded or NodedConfig()
        self.idle = idle or IdleGpuConfig()
        self.cgroups = cgroups
        self.gpus = gpus
        self.gpu_devices = gpu_devices or []
        self.health = health or (lambda reason, detail: None)
        self.cores = cores or CoreAllocator()
        self.instance = secrets.token_hex(6)  # tells this noded's jobs from any other's
        self.jobs: dict[int, RunningJob] = {}
        # a requeued job's next run, held until its earlier copy here is gone
        self._next_runs: dict[int, pb.LaunchJobRequest] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        os.makedirs(spool_dir, mode=0o755, exist_ok=True)
        if os.geteuid() == 0 and not _reachable_by_others(spool_dir):
            log.warning(
                "the spool directory is not reachable by other users: their batch "
                "scripts cannot run (each directory above it needs o+x)",
                spool=spool_dir,
            )

    def running_job_ids(self) -> list[int]:
        return sorted(self.jobs)

    # ------------------------------------------------------------ launch

    async def launch(self, request: pb.LaunchJobRequest) -> None:
        """Take the job on; prolog and start run in the background (LaunchJob returns)."""
        job = request.job
        current = self.jobs.get(job.job_id)
        if current is not None:
            if job.restart_count > current.restart_count:
                self._supersede(current, request)
            return  # else a retried LaunchJob: it is already here
        alloc = next((a for a in job.allocations if a.node == self.node_name), None)
        running = RunningJob(
            job=job,
            cluster=request.cluster,
            kill_wait_s=request.kill_wait_s or 30.0,
            marker=f"{self.node_name}:{job.job_id}:{self.instance}",
            alloc=alloc or pb.NodeAllocation(node=self.node_name),
        )
        self.jobs[job.job_id] = running
        self._save_state(running)  # before anything runs: a new noded must find it
        task = asyncio.create_task(self._run(running))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _supersede(self, current: RunningJob, request: pb.LaunchJobRequest) -> None:
        """A requeued job's next run came while its earlier copy here still ends (its
        kill may even come later): that copy is killed, and the new run starts once it is
        gone, so the two never run at once nor share a job directory or cgroup."""
        queued = self._next_runs.get(current.job_id)
        if queued is None or queued.job.restart_count < request.job.restart_count:
            self._next_runs[current.job_id] = request
        log.info(
            "earlier run superseded: the new one waits for it to end",
            job_id=current.job_id,
            run=current.restart_count,
            next_run=request.job.restart_count,
        )
        if not current.cancel_requested:
            current.cancel_requested = True
            self._terminate(current, request.kill_wait_s or current.kill_wait_s)

    async def _run(self, running: RunningJob) -> None:
        try:
            if await self._prolog(running):
                if running.cancel_requested:
                    self._report_exit(running, exit_code=0, exit_signal=int(signal.SIGTERM))
                    return
                try:
                    await self._start(running)
                except LaunchError as exc:
                    self._launch_failed(running, str(exc))
                    return
                assert running.process is not None
                rc = await running.process.wait()
                await self._finish(running, rc)
        except Exception:
            log.exception("job handling failed", job_id=running.job_id)
            self._launch_failed(running, "noded internal error (see its log)")
        finally:
            await self._cleanup(running)

    async def _prolog(self, running: RunningJob) -> bool:
        if not self.noded.prolog:
            return True
        env = script_environment(running.job, self.node_name, running.cluster, "prolog_slurmd")
        failure = await run_script(self.noded.prolog, env, self.noded.prolog_timeout_s)
        if not failure:
            return True
        self._launch_failed(running, f"prolog failed: {failure}", Update.END_PROLOG_FAILED)
        return False

    def _launch_failed(
        self, running: RunningJob, detail: str, end_reason: int = Update.END_NONE
    ) -> None:
        log.warning("launch failed", job_id=running.job_id, node=self.node_name, error=detail)
        if running.fenced:
            return
        self.report(
            Update(
                job_id=running.job_id,
                kind=Update.KIND_LAUNCH_FAILED,
                time=time.time(),
                detail=detail,
                end_reason=end_reason,  # type: ignore[arg-type]
                restart_count=running.restart_count,
            )
        )

    async def _start(self, running: RunningJob) -> None:
        job, spec = running.job, running.job.spec
        who = identity_for(job, self.node_name)
        files = resolve_files(job, self.node_name)
        script = write_script(job, self._job_dir(job.job_id), who)
        env = batch_environment(
            job,
            self.node_name,
            running.cluster,
            pw=who.pw,
            default_path=self.noded.default_path,
            checkpoint_root=self.noded.checkpoint_dir,
        )
        if self.noded.checkpoint_dir:  # the default, in the user's submit dir, is theirs
            try:
                jobdir.make_user_dir(env["CORRAL_CHECKPOINT_DIR"], who.uid, who.gid)
            except OSError as exc:  # the job sees it missing: its own to report
                log.warning("checkpoint directory not made", job_id=job.job_id, error=str(exc))
        path = os.path.join(self._job_dir(job.job_id), "progress")
        running.progress_file = path if progress.make_file(path, who.uid, who.gid) else ""
        env[PROGRESS_VAR] = running.progress_file
        env[MARKER_VAR] = running.marker
        running.cgroup = self._make_cgroup(running)
        gated = await spawn_gated(
            [script, *spec.argv],
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
            gated.close()  # the shim exits at the closed gate without running anything
            await gated.process.wait()
            log.warning("confine failed", rc=gated.process.returncode, exc_info=True)
            raise LaunchError(f"cannot confine the job: {exc.strerror or exc}") from None
        await gated.open()
        running.process = gated.process
        running.procs = JobProcesses(gated.process.pid, running.marker, running.cgroup, uid=who.uid)
        self._save_state(running)
        self._arm_timers(running)
        log.info(
            "job started",
            job_id=job.job_id,
            node=self.node_name,
            pid=gated.process.pid,
            user=job.user,
            uid=who.uid,
            cgroup=bool(running.cgroup),
            stdout=files.stdout,
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

    def contain_step_task(self, job_id: int, pid: int) -> None:
        """A step task of a batch job running here shares its cgroup and cores."""
        running = self.jobs.get(job_id)
        if running is None:
            return  # a node where only steps run: no job cgroup (see admin-guide)
        if running.cgroup is not None:
            running.cgroup.add(pid)
        cores = self.cores.by_job.get(job_id)
        if cores:
            os.sched_setaffinity(pid, cores)

    def _arm_timers(self, running: RunningJob) -> None:
        limit = running.job.time_limit_s
        if limit <= 0:
            return
        running.timers.append(self.clock.call_later(limit, self._time_limit, running))
        try:
            warn = warn_signal(running.job.spec)
        except CorralError as exc:
            log.warning("bad --signal ignored", job_id=running.job_id, error=str(exc))
        else:
            if warn is not None:
                at = max(0.0, limit - warn.seconds)
                running.timers.append(self.clock.call_later(at, self._warn, running, warn))

    def _warn(self, running: RunningJob, warn: WarnSignal) -> None:
        log.info(
            "signalling before the time limit",
            job_id=running.job_id,
            signal=signal.Signals(warn.signal).name,
            seconds_left=warn.seconds,
            batch_only=warn.batch_only,
        )
        if warn.batch_only:  # without B: the steps get it, each from its own timer
            self._send(running, warn.signal, batch_only=True)

    def _time_limit(self, running: RunningJob) -> None:
        log.info("time limit reached", job_id=running.job_id, limit_s=running.job.time_limit_s)
        running.end_reason = Update.END_TIMEOUT
        self._notice(running, " DUE TO TIME LIMIT")
        self._terminate(running, running.kill_wait_s)

    def _notice(self, running: RunningJob, why: str) -> None:
        """slurmstepd's line at the end of the job's stderr, which scripts and people
        grep for: ``slurmstepd-NODE: error: *** JOB N ON NODE CANCELLED AT time [DUE TO
        TIME LIMIT] ***`` (22.05 names its node after ``slurmstepd``).
        noded is root: it appends only to a regular file of the job's user, never
        through a link, and never creates one (jobdir.append_to_users_file)."""
        files = resolve_files(running.job, self.node_name)
        path = os.path.join(files.workdir, files.stderr)  # an absolute stderr stays as is
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        line = (
            f"slurmstepd-{self.node_name}: error: *** JOB {running.job_id} ON {self.node_name} "
            f"CANCELLED AT {stamp}{why} ***\n"
        )
        jobdir.append_to_users_file(path, running.job.uid, line)

    # ------------------------------------------------------------ ending

    async def _finish(self, running: RunningJob, rc: int) -> None:
        for timer in running.timers:
            timer.cancel()
        if running.kill_task is not None:
            running.kill_task.cancel()
        # the batch shell is gone; whatever it left behind goes too
        await self._reap(running)
        if (
            running.end_reason == Update.END_NONE
            and running.cgroup is not None
            and running.cgroup.oom_kills() > 0
        ):
            running.end_reason = Update.END_OUT_OF_MEMORY
        exit_code, exit_signal = (0, -rc) if rc < 0 else (rc, 0)
        await self._epilog(running)
        self._report_exit(running, exit_code=exit_code, exit_signal=exit_signal)

    async def _reap(self, running: RunningJob) -> None:
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

    async def _epilog(self, running: RunningJob) -> None:
        if not self.noded.epilog:
            return
        env = script_environment(running.job, self.node_name, running.cluster, "epilog_slurmd")
        failure = await run_script(self.noded.epilog, env, self.noded.epilog_timeout_s)
        if failure:
            log.error("epilog failed", job_id=running.job_id, node=self.node_name, error=failure)
            self.health("Epilog error", failure)

    def _report_exit(self, running: RunningJob, *, exit_code: int, exit_signal: int) -> None:
        usage = self._usage(running)
        log.info(
            "job exited",
            job_id=running.job_id,
            node=self.node_name,
            exit_code=exit_code,
            signal=exit_signal,
            end_reason=Update.EndReason.Name(running.end_reason),  # type: ignore[arg-type]
            max_rss_kb=usage.max_rss_kb,
            fenced=running.fenced,
        )
        if running.fenced:
            return  # the job is another node's now: ctld must not hear of this copy
        self.report(
            Update(
                job_id=running.job_id,
                kind=Update.KIND_EXITED,
                time=time.time(),
                exit_code=exit_code,
                exit_signal=exit_signal,
                signalled_by_request=running.cancel_requested and exit_signal != 0,
                end_reason=running.end_reason,  # type: ignore[arg-type]
                usage=usage,
                restart_count=running.restart_count,
                detail=running.stall,
            )
        )

    def _usage(self, running: RunningJob) -> pb.JobUsage:
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

    async def _cleanup(self, running: RunningJob) -> None:
        if running.kill_task is not None:  # its pids may be reused once the job is gone
            running.kill_task.cancel()
        self.jobs.pop(running.job_id, None)
        self.cores.release(running.job_id)
        if running.cgroup is not None:
            deadline = time.monotonic() + 10.0
            while not running.cgroup.try_remove():
                if time.monotonic() > deadline:
                    log.warning("job cgroup not removed", job_id=running.job_id)
                    break
                await asyncio.sleep(0.02)  # the kernel finishes tearing dead tasks down
        try:
            jobdir.discard(self._job_dir(running.job_id))
        except OSError as exc:
            log.warning("job directory not removed", job_id=running.job_id, error=str(exc))
        spool.remove(self.spool_dir, running.job_id)  # last: until now a new noded must find it
        next_run = self._next_runs.pop(running.job_id, None)
        if next_run is not None:
            await self.launch(next_run)

    def _job_dir(self, job_id: int) -> str:
        return spool.job_dir(self.spool_dir, job_id)

    def _save_state(self, running: RunningJob) -> None:
        procs, cgroup = running.procs, running.cgroup
        state = spool.JobState(
            job_id=running.job_id,
            restart_count=running.restart_count,
            marker=running.marker,
            uid=procs.uid if procs is not None else _job_uid(running.job),
            root_pid=procs.root_pid if procs is not None else -1,
            root_created=procs.root_created if procs is not None else 0.0,
            cgroup_version=cgroup.version if cgroup is not None else 0,
            cgroup_dirs={k: str(v) for k, v in cgroup.dirs.items()} if cgroup else {},
            since=running.since,
        )
        try:
            spool.save(self.spool_dir, state)
        except OSError as exc:
            log.error("job state not saved in the spool", job_id=running.job_id, error=str(exc))

    # ------------------------------------------------------------ recovery and fencing

    async def recover(self) -> list[int]:
        """Settle what an earlier noded left here (recovery.py); returns the jobs
        reported lost. Runs before the first registration."""
        return await recovery.recover(
            self.spool_dir, self.instance, self.node_name, self.cgroups, self.report
        )

    def fence(self, keep: set[int]) -> list[int]:
        """Kill every job ctld did not let this node keep (it runs elsewhere now)."""
        fenced = []
        for running in list(self.jobs.values()):
            if running.job_id in keep or running.fenced:
                continue
            log.warning(
                "job no longer this node's: killed (fenced)",
                job_id=running.job_id,
                node=self.node_name,
            )
            running.fenced = True
            running.cancel_requested = True
            self._terminate(running, 0.0)
            fenced.append(running.job_id)
        return fenced

    # ------------------------------------------------------------ signals

    def signal(self, req: pb.SignalJobRequest) -> bool:
        running = self.jobs.get(req.job_id)
        if running is None:
            return False
        if req.terminate:
            if not running.cancel_requested:
                self._notice(running, "")
            running.cancel_requested = True
            self._terminate(running, req.kill_wait_s)
            return True
        if not 0 < req.signal < signal.NSIG:
            raise LaunchError(f"invalid signal {req.signal}")
        if req.batch_only or req.full:  # else only the steps get it (Slurm 22.05)
            self._send(running, req.signal, batch_only=req.batch_only)
        return True

    def _send(self, running: RunningJob, sig: int, *, batch_only: bool) -> None:
        if running.process is None or running.procs is None:
            return  # still in its prolog: nothing of the job runs yet
        if batch_only:
            if running.process.returncode is None:  # once reaped, its pid may be reused
                with contextlib.suppress(ProcessLookupError):
                    os.kill(running.process.pid, sig)
        else:
            running.procs.signal_all(sig)

    def _terminate(self, running: RunningJob, wait_s: float) -> None:
        """SIGCONT and SIGTERM to every process of the job now, SIGKILL after wait_s."""
        if running.procs is not None:
            running.procs.signal_all(signal.SIGCONT, signal.SIGTERM)
        if running.kill_task is None or (running.fenced and wait_s == 0):
            if running.kill_task is not None:
                running.kill_task.cancel()
            running.kill_task = asyncio.create_task(self._kill_after(running, wait_s))

    async def _kill_after(self, running: RunningJob, wait_s: float) -> None:
        await asyncio.sleep(max(wait_s, 0.0))
        if running.procs is not None:
            running.procs.signal_all(signal.SIGKILL)

    async def shutdown(self, kill_wait_s: float) -> None:
        """Stop every job (node shutdown): SIGTERM, then SIGKILL after kill_wait."""
        self._next_runs.clear()  # nothing new starts on a node going down
        for running in list(self.jobs.values()):
            running.cancel_requested = True
            self._terminate(running, kill_wait_s)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=kill_wait_s + REAP_TIMEOUT_S + 5)

    # ------------------------------------------------------------ monitoring

    async def run_monitor(self) -> None:
        """Sample every running job each interval: accounting, memory limit, idle GPUs."""
        while True:
            await asyncio.sleep(self.noded.sample_interval_s)
            for running in list(self.jobs.values()):
                try:
                    self.sample(running)
                    self.check_progress(running, self.clock.now())
                except Exception:
                    log.exception("sampling failed", job_id=running.job_id)

    def sample(self, running: RunningJob) -> None:
        procs = running.procs
        if procs is None or running.process is None or running.process.returncode is not None:
            return
        rss_kb = procs.sample(running.usage)
        if (
            running.cgroup is None
            and running.mem_limit_kb
            and rss_kb > running.mem_limit_kb
            and running.end_reason == Update.END_NONE
        ):
            log.warning(
                "job over its memory limit: killed",
                job_id=running.job_id,
                rss_kb=rss_kb,
                limit_kb=running.mem_limit_kb,
            )
            running.end_reason = Update.END_OUT_OF_MEMORY
            procs.signal_all(signal.SIGKILL)
            return
        indices = list(running.alloc.gpu_indices)
        if self.gpus is None or not indices:
            return
        samples = self.gpus.sample(indices, procs.pids())
        running.gpu.add(samples)
        running.gpu_utils = [s.util_pct for s in samples]
        self._check_idle(running, [s.util_pct for s in samples])

    def check_progress(self, running: RunningJob, now: float) -> bool:
        """A job that opted in (touched its progress file) and then stopped touching it
        for its stall timeout, while its GPUs idle, is stalled: killed, reported
        END_STALLED with the node and rank, and requeued by ctld."""
        timeout = progress.timeout_for(running.job, self.noded.progress_timeout_s)
        if timeout <= 0 or not running.progress_file or running.stall:
            return False
        if running.process is None or running.process.returncode is not None:
            return False
        silent = progress.silent_for(running.progress_file, now)
        if silent is None or silent < timeout:
            return False  # never touched (not opted in), or recent
        busy = progress.gpus_busy(running.gpu_utils, self.idle.threshold_pct)
        if running.alloc.gpu_indices and (busy or not running.gpu_utils):
            return False  # GPUs at work (or not sampled yet): slow, not hung
        running.stall = progress.stall_detail(self.node_name, 0, "batch script", silent)
        log.error(
            "job stalled: killed to be requeued",
            job_id=running.job_id,
            node=self.node_name,
            rank=0,
            silent_s=round(silent),
        )
        running.end_reason = Update.END_STALLED
        self._terminate(running, running.kill_wait_s)
        return True

    def _check_idle(self, running: RunningJob, utils: list[float]) -> None:
        if self.idle.window_s <= 0 or not utils:
            return
        now = self.clock.now()
        if max(utils) >= self.idle.threshold_pct:
            if running.idle_reported:
                self.report(Update(job_id=running.job_id, kind=Update.KIND_IDLE_GPUS, time=0))
            running.idle_since, running.idle_reported = 0.0, False
            return
        if not running.idle_since:
            running.idle_since = now
        if not running.idle_reported and now - running.idle_since >= self.idle.window_s:
            running.idle_reported = True
            log.warning(
                "job's GPUs idle",
                job_id=running.job_id,
                since=running.idle_since,
                threshold_pct=self.idle.threshold_pct,
            )
            self.report(
                Update(job_id=running.job_id, kind=Update.KIND_IDLE_GPUS, time=running.idle_since)
            )


def _job_uid(job: pb.Job) -> int:
    """The uid the job's processes will run as (spawn.identity_for's answer)."""
    return job.uid if os.geteuid() == 0 else os.getuid()


def _reachable_by_others(path: str) -> bool:
    here = os.path.abspath(path)
    while True:
        try:
            if not os.stat(here).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here = parent
