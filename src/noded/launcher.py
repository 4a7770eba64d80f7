"""A batch job's life on the node, carried out: the executor of the job machine.

The machine (machine.py) decides everything: what a launch, a cancel, a time limit,
an exit, a sample or a fence calls for. ``Launcher`` feeds it events
(``handle``) and carries out the actions it answers with (``carry_out``): prolog and
epilog, the spawn (batch.py, the launch path), signals, timers on noded's clock,
the spool records, reports to ctld and the cleanup. What takes time (a script, a
spawn, a reap, a cleanup) runs in a task of its own and feeds what came of it back.

Each job runs as its user in its own session, inside its cgroup when the host has
them (cgroups.py), with every descendant tracked (tracking.py) so that cancel,
time-out and shutdown leave nothing behind. The monitor (monitor.py) samples memory,
CPU and GPUs every ``noded.sample_interval_s``; recovery.py settles what an earlier
noded left. How the job ended goes to ctld as one status update, after the epilog,
so the job's resources stay allocated until the node is clean again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from corral.checkpoints import job_label
from corral.clock import Clock, SystemClock
from corral.config import IdleGpuConfig, NodedConfig
from corral.errors import InvalidRequest, LaunchError
from corral.wire import corral_pb2 as pb
from noded import batch, checkpoints, jobdir, monitor, progress, records, recovery, spool, takeover
from noded.batch import REAP_TIMEOUT_S, BatchStarter, LaunchPath
from noded.cgroups import CgroupManager
from noded.containers import sweep
from noded.containers.runtime import Containers
from noded.core.events import (
    Action,
    Adopt,
    AwaitExit,
    Broke,
    Cancel,
    CancelTimers,
    CleanedUp,
    CleanUp,
    Drain,
    EpilogDone,
    Event,
    Exited,
    Fence,
    FoundLost,
    Launch,
    Log,
    Notice,
    PrologDone,
    Reap,
    Reaped,
    Report,
    RunEpilog,
    RunProlog,
    SaveRecord,
    SetTimer,
    Shutdown,
    Signal,
    Signalled,
    Spawn,
    Spawned,
    SpawnFailed,
    TakenOver,
    TakeOn,
)
from noded.core.jobrun import MachineConfig
from noded.core.machine import JobMachine
from noded.gpu import GpuBackend, GpuDevice
from noded.limits import CoreAllocator
from noded.running import RunningJob
from noded.scripts import run_script, script_environment
from noded.spawn import batch_key
from noded.supervisor import JobSupervisors
from noded.takeover import BatchTakeover, Takeover

log = structlog.get_logger("noded")

Update = pb.JobStatusUpdate
ReportSink = Callable[[pb.JobStatusUpdate], None]
HealthSink = Callable[[str, str], None]  # (reason, detail): drain this node

__all__ = ["REAP_TIMEOUT_S", "LaunchError", "Launcher", "RunningJob"]


class Launcher:
    def __init__(
        self,
        node_name: str,
        spool_dir: str,
        report: ReportSink,
        *,
        noded: NodedConfig | None = None,
        idle: IdleGpuConfig | None = None,
        cgroups: CgroupManager | None = None,
        gpus: GpuBackend | None = None,
        gpu_devices: list[GpuDevice] | None = None,
        health: HealthSink | None = None,
        cores: CoreAllocator | None = None,
        clock: Clock | None = None,
        launch_path: LaunchPath | None = None,
        containers: Containers | None = None,
        supervisors: JobSupervisors | None = None,
    ) -> None:
        self.node_name = node_name
        self.clock: Clock = clock or SystemClock()  # timers and windows (tests: ManualClock)
        self.spool_dir = spool_dir
        self.report = report
        self.noded = noded or NodedConfig()
        self.idle = idle or IdleGpuConfig()
        self.cgroups = cgroups
        self.gpus = gpus
        self.health = health or (lambda reason, detail: None)
        self.cores = cores or CoreAllocator()
        self.containers = containers
        # each job's supervisor: the parent of its processes (supervise.py)
        self.supervisors = supervisors or JobSupervisors(spool_dir)
        self.launch_path: LaunchPath = launch_path or BatchStarter(
            node_name,
            spool_dir,
            self.noded,
            cgroups=cgroups,
            gpus=gpus,
            gpu_devices=gpu_devices,
            cores=self.cores,
            containers=containers,
            supervisors=self.supervisors,
        )
        self.instance = secrets.token_hex(6)  # tells this noded's jobs from any other's
        self.machine = JobMachine(
            MachineConfig(
                node=node_name,
                prolog=bool(self.noded.prolog),
                epilog=bool(self.noded.epilog),
                idle_window_s=self.idle.window_s,
                idle_threshold_pct=self.idle.threshold_pct,
                progress_timeout_s=self.noded.progress_timeout_s,
            )
        )
        # the runs being carried out (a run's record goes when its cleanup begins)
        self.jobs: dict[int, RunningJob] = {}
        self._adopting: dict[int, BatchTakeover] = {}  # taken over, until the machine's Adopt
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

    # ------------------------------------------------------------ the machine's seam

    def handle(self, *events: Event) -> list[Action]:
        """Feed the machine and carry out what it answers; returns those actions."""
        actions = self.machine.handle(*events, now=self.clock())
        self.carry_out(actions)
        return actions

    def carry_out(self, actions: list[Action]) -> None:
        for action in actions:
            self._carry_out(action)

    def _carry_out(self, action: Action) -> None:
        match action:
            case Log(level, message, fields):
                getattr(log, level)(message, **fields)
            case Report(update):
                running = self.jobs.get(update.job_id)
                if update.kind == Update.KIND_EXITED and running is not None:
                    update.checkpoint_time = progress.checkpoint_mark(running.checkpoint_dir)
                self.report(update)
            case Drain(reason, detail):
                self.health(reason, detail)
            case TakeOn(job_id, _, request):
                state = self.machine.jobs[job_id]
                marker = f"{self.node_name}:{job_id}:{self.instance}"
                self.jobs[job_id] = RunningJob(state, marker)
                if request is not None:  # a later noded takes the run over with it
                    self._save_request(job_id, request)
            case Adopt(job_id):
                took = self._adopting.pop(job_id)
                state = self.machine.jobs[job_id]
                self.jobs[job_id] = takeover.adopted(took, state, self.cores)
            case AwaitExit(job_id):
                self._background(self.jobs[job_id], self._await_exit)
            case SaveRecord(job_id):
                self._save_state(self.jobs[job_id])
            case RunProlog(job_id):
                self._background(self.jobs[job_id], self._prolog)
            case Spawn(job_id):
                self._background(self.jobs[job_id], self._spawn)
            case SetTimer(job_id, name, delay, event):
                running = self.jobs[job_id]
                old = running.timers.pop(name, None)
                if old is not None:
                    old.cancel()
                running.timers[name] = self.clock.call_later(delay, self._timer, event)
            case CancelTimers(job_id):
                self._cancel_timers(self.jobs[job_id])
            case Signal(job_id, signals, batch_only):
                self._signal(self.jobs[job_id], signals, batch_only)
            case Notice(job_id, why):
                batch.notice(self.jobs[job_id].job, self.node_name, why)
            case Reap(job_id):
                self._background(self.jobs[job_id], self._reap)
            case RunEpilog(job_id):
                self._background(self.jobs[job_id], self._epilog)
            case CleanUp(job_id):
                running = self.jobs.pop(job_id)
                self._cancel_timers(running)  # its pids may be reused once the job is gone
                self.cores.release(job_id)
                self._background(running, self._cleanup)
            case _:
                raise TypeError(f"not an action: {action!r}")

    def _background(
        self, running: RunningJob, work: Callable[[RunningJob], Coroutine[Any, Any, None]]
    ) -> None:
        """What takes time runs apart; noded's own failure in it fails the run."""

        async def guarded() -> None:
            try:
                await work(running)
            except Exception:
                log.exception("job handling failed", job_id=running.job_id)
                self.handle(Broke(running.job_id, running.restart_count))

        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _timer(self, event: Event) -> None:
        try:
            self.handle(event)
        except Exception:
            log.exception("timer handling failed", event=repr(event))

    # ------------------------------------------------------------ what takes time

    async def _prolog(self, running: RunningJob) -> None:
        env = script_environment(running.job, self.node_name, running.cluster, "prolog_slurmd")
        failure = await run_script(self.noded.prolog, env, self.noded.prolog_timeout_s)
        self.handle(PrologDone(running.job_id, running.restart_count, failure))

    async def _spawn(self, running: RunningJob) -> None:
        job_id, run = running.job_id, running.restart_count
        try:
            await self.launch_path.start(running)
        except LaunchError as exc:
            self.handle(SpawnFailed(job_id, run, str(exc)))
            return
        running.spawned_at = time.time()
        self.handle(Spawned(job_id, run, contained=running.cgroup is not None))
        await self._await_exit(running)

    async def _await_exit(self, running: RunningJob) -> None:
        assert running.process is not None
        rc = await running.process.wait()
        self.handle(Exited(running.job_id, running.restart_count, rc))

    async def _reap(self, running: RunningJob) -> None:
        await batch.reap(running)
        oom_kills = running.cgroup.oom_kills() if running.cgroup is not None else 0
        usage = batch.usage_of(running)
        self.handle(Reaped(running.job_id, running.restart_count, oom_kills, usage))

    async def _epilog(self, running: RunningJob) -> None:
        env = script_environment(running.job, self.node_name, running.cluster, "epilog_slurmd")
        failure = await run_script(self.noded.epilog, env, self.noded.epilog_timeout_s)
        self.handle(EpilogDone(running.job_id, running.restart_count, failure))

    async def _cleanup(self, running: RunningJob) -> None:
        try:
            if running.supervisor is not None:  # the run's exit is had: it may go
                await running.supervisor.forget(batch_key(running.restart_count))
            await self.supervisors.release(running.job_id, batch.HOLDER)
            await batch.remove_cgroup(running)
            if self.containers is not None:  # the job's containers, named ones too
                await self.containers.job_done(running.job_id)
            try:
                jobdir.discard(spool.job_dir(self.spool_dir, running.job_id))
            except OSError as exc:
                log.warning("job directory not removed", job_id=running.job_id, error=str(exc))
            spool.remove(self.spool_dir, running.job_id)  # last: until now a new noded finds it
        finally:
            self.handle(CleanedUp(running.job_id, running.restart_count))

    # ------------------------------------------------------------ signals and timers

    def _signal(self, running: RunningJob, signals: tuple[int, ...], batch_only: bool) -> None:
        if batch_only:
            for sig in signals:
                self._send(running, sig, batch_only=True)
        elif running.procs is not None:  # none yet: still in its prolog or spawn
            running.procs.signal_all(*signals)

    def _send(self, running: RunningJob, sig: int, *, batch_only: bool) -> None:
        if running.process is None or running.procs is None:
            return  # still in its prolog: nothing of the job runs yet
        if batch_only:
            if running.process.returncode is None:  # once reaped, its pid may be reused
                with contextlib.suppress(ProcessLookupError):
                    os.kill(running.process.pid, sig)
        else:
            running.procs.signal_all(sig)

    @staticmethod
    def _cancel_timers(running: RunningJob) -> None:
        for timer in running.timers.values():
            timer.cancel()
        running.timers.clear()

    def _save_request(self, job_id: int, request: pb.LaunchJobRequest) -> None:
        try:
            name = records.job_request_name(job_id)
            records.save_request(self.spool_dir, name, request.SerializeToString())
        except OSError as exc:
            log.error("launch request not saved in the spool", job_id=job_id, error=str(exc))

    def _save_state(self, running: RunningJob) -> None:
        procs, cgroup, sup = running.procs, running.cgroup, running.supervisor
        state = spool.JobState(
            job_id=running.job_id,
            restart_count=running.restart_count,
            marker=running.marker,
            uid=procs.uid if procs is not None else batch.job_uid(running.job),
            root_pid=procs.root_pid if procs is not None else -1,
            root_created=procs.root_created if procs is not None else 0.0,
            cgroup_version=cgroup.version if cgroup is not None else 0,
            cgroup_dirs={k: str(v) for k, v in cgroup.dirs.items()} if cgroup else {},
            since=running.since,
            supervisor_pid=sup.pid if sup is not None else 0,
            supervisor_path=sup.path if sup is not None else "",
            spawned_at=running.spawned_at,
            checkpoint_dir=running.checkpoint_dir,
            progress_file=running.progress_file,
            cores=list(self.cores.by_job.get(running.job_id, [])),
            usage=takeover.usage_record(running),
        )
        try:
            spool.save(self.spool_dir, state)
        except OSError as exc:
            log.error("job state not saved in the spool", job_id=running.job_id, error=str(exc))

    # ------------------------------------------------------------ from ctld

    async def launch(self, request: pb.LaunchJobRequest) -> None:
        """Take the job on; prolog and start run in the background (LaunchJob returns)."""
        self.handle(Launch(request))

    async def remove_checkpoint(self, req: pb.SignalJobRequest) -> bool:
        """The job ended for good: its checkpoint directory under noded.checkpoint_dir
        goes (one in a submit dir is the user's own: never touched)."""
        root = self.noded.checkpoint_dir
        if not root:
            return False
        task = req.array_task_id if req.HasField("array_task_id") else None
        # an older ctld names no directory: the job's from before unique ids
        name = req.checkpoint_name or job_label(req.job_id, req.array_job_id, task)
        removed = await asyncio.to_thread(checkpoints.remove, root, name, req.uid)
        if removed:
            log.info("checkpoint directory removed", job_id=req.job_id, name=name)
        return removed

    def signal(self, req: pb.SignalJobRequest) -> bool:
        if req.job_id not in self.jobs:
            return False
        if req.terminate:
            why = " DUE TO NODE FAILURE" if req.node_failure else ""
            self.handle(Cancel(req.job_id, req.kill_wait_s, why))
            return True
        if not 0 < req.signal < signal.NSIG:
            raise InvalidRequest(f"invalid signal {req.signal}")
        self.handle(Signalled(req.job_id, req.signal, req.batch_only, req.full))
        return True

    def fence(self, keep: set[int]) -> list[int]:
        """Kill every job ctld did not let this node keep (it runs elsewhere now)."""
        fenced = self.machine.fenceable(keep)
        self.handle(Fence(frozenset(keep)))
        return fenced

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

    async def recover(self) -> Takeover:
        """Take over what an earlier noded left running here (takeover.py) and settle
        the rest (recovery.py: killed, reported lost). Runs before the first
        registration; the steps taken over are the step runner's to resume."""
        took = await takeover.take_over(self.spool_dir)
        await recovery.recover(
            self.spool_dir,
            self.instance,
            self.node_name,
            self.cgroups,
            lambda job_id, run: self.handle(FoundLost(job_id, run)),
            took,
        )
        kept = took.job_ids()
        if self.containers is not None:  # after the kills: nothing of theirs runs now
            await asyncio.to_thread(sweep.sweep, self.containers.state, kept)
            await asyncio.to_thread(self.containers.open_cache, kept)
        now = time.time()
        for batch_run in took.batches:
            job_id = batch_run.record.job_id
            self.supervisors.adopt(job_id, batch_run.supervisor, batch.HOLDER)
            self._adopting[job_id] = batch_run
            process = batch_run.found.process
            self.handle(
                TakenOver(
                    batch_run.request,
                    elapsed_s=max(0.0, now - batch_run.record.spawned_at),
                    rc=process.returncode,
                    contained=bool(batch_run.record.cgroup_dirs),
                )
            )
        return took

    async def shutdown(self, kill_wait_s: float) -> None:
        """Stop every job (node shutdown): SIGTERM, then SIGKILL after kill_wait."""
        self.handle(Shutdown(kill_wait_s))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + kill_wait_s + REAP_TIMEOUT_S + 5
        while self._tasks and loop.time() < deadline:  # each run's last task starts the next
            await asyncio.wait(set(self._tasks), timeout=deadline - loop.time())

    async def run_monitor(self) -> None:
        """Sample every running job each interval (monitor.py)."""
        await monitor.run(self)


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
