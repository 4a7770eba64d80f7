"""Job steps on this node: srun's tasks, their I/O streamed back, their signals and exits.

One RunTasks stream (or task stream, stream.py) per node of a step. ``StepRunner`` is
the step machine's executor (stepmachine.py decides: a task's exit, a stalled rank,
the job's end, the --signal warning, the step's end report): the tasks start through
taskstart.py, their I/O runs through taskio.py, and this module ties them to the
stream. The stream ends only after srun half-closed it (it does once it saw every exit
here), so srun never writes to a finished stream (gRPC then reports INTERNAL over the
real status).

Each task gets its own progress heartbeat file (``$CORRAL_PROGRESS_FILE``, progress.py);
``check_progress`` reads their age (and samples the GPUs of a task that could be
stalled) and the machine names a silent task's node and rank to ctld (END_STALLED: the
job is requeued) and stops the step here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

import structlog

from corral.clock import Clock, SystemClock, Timer
from corral.config import IdleGpuConfig, NodedConfig
from corral.errors import LaunchError
from corral.wire import corral_pb2 as pb
from noded import progress, records, taskio
from noded.containers.runtime import Containers
from noded.core import stall
from noded.core.events import Log, Report
from noded.core.stepmachine import (
    STALL_KILL_S,
    KillAfter,
    SignalStep,
    Silence,
    Silent,
    StepAction,
    StepEvent,
    StepGone,
    StepKillDue,
    StepMachine,
    StepOver,
    StepWarnDue,
    TaskExited,
    Terminate,
    warning_for,
)
from noded.gpu import GpuBackend
from noded.supervisor import JobSupervisors
from noded.taskio import DRAIN_S, QUEUE_DEPTH, Chunk, RunningStep, Started, Task, to_event
from noded.taskstart import TaskStarter

log = structlog.get_logger("noded")

__all__ = ["DRAIN_S", "QUEUE_DEPTH", "Chunk", "RunningStep", "Started", "StepRunner", "Task"]

HALF_CLOSE_WAIT_S = 30.0  # after the last exit, how long srun has to half-close
SUPERSEDED_KILL_WAIT_S = STALL_KILL_S  # an earlier run's step: SIGTERM, then SIGKILL
# its end, bounded: SIGKILL, the output drain and srun's half-close all fit inside
SUPERSEDED_END_WAIT_S = SUPERSEDED_KILL_WAIT_S + DRAIN_S + HALF_CLOSE_WAIT_S + 5.0

Verify = Callable[[int, int], Awaitable[tuple[pb.Job, pb.Step, str]]]


def step_holder(run: int, step_id: int) -> str:
    """A step's hold on its job's supervisor (JobSupervisors)."""
    return f"step.{run}.{step_id}"


class StepRunner:
    def __init__(
        self,
        node_name: str,
        job_marker: str,
        verify: Verify,
        report: Callable[[pb.JobStatusUpdate], None] | None = None,
        contain: Callable[[int, int], None] | None = None,
        *,
        spool_dir: str = "",
        noded: NodedConfig | None = None,
        idle: IdleGpuConfig | None = None,
        gpus: GpuBackend | None = None,
        clock: Clock | None = None,
        containers: Containers | None = None,
        supervisors: JobSupervisors | None = None,
    ) -> None:
        # each job's supervisor here: the parent of its tasks (supervise.py)
        self.supervisors = supervisors or JobSupervisors(spool_dir or "/tmp")
        # progress heartbeats: each task's file lives under the spool ("": none)
        self.spool_dir = spool_dir
        self.noded = noded or NodedConfig()
        self.idle = idle or IdleGpuConfig()
        self.gpus = gpus
        self.clock: Clock = clock or SystemClock()  # --signal warning, stalls (tests: ManualClock)
        self.node_name = node_name
        # tells ctld a step's tasks here are gone, even when srun died without saying so
        self.report = report or (lambda update: None)
        self.job_marker = job_marker  # format with job_id: the batch job's marker
        # ctld's own record of the step: srun's copy could claim any user
        self.verify = verify
        self.machine = StepMachine(node_name)
        self.containers = containers
        self.starter = TaskStarter(
            node_name,
            job_marker,
            spool_dir,
            contain or (lambda job_id, pid: None),
            containers=containers,
        )
        self.steps: dict[tuple[int, int], RunningStep] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.detaching = False  # noded is stopping: steps are left to the next one

    def marker(self, job_id: int) -> str:
        return self.job_marker.format(job_id=job_id)

    # ------------------------------------------------------------ the machine's seam

    def handle(self, running: RunningStep, event: StepEvent) -> list[StepAction]:
        """Feed the step machine and carry out what it answers; returns those actions."""
        actions = self.machine.handle(running, event, self.clock())
        for action in actions:
            match action:
                case SignalStep(signals):
                    for sig in signals:
                        running.signal(sig)
                case KillAfter(wait_s):
                    kill = StepKillDue()
                    running.kill_task = self.clock.call_later(wait_s, self.handle, running, kill)
                case Report(update):
                    self.report(update)
                case Log(level, message, fields):
                    getattr(log, level)(message, **fields)
        return actions

    # ------------------------------------------------------------ the stream

    async def run(
        self, start: pb.RunTasksRequest, inputs: AsyncIterator[pb.TaskInput]
    ) -> AsyncGenerator[pb.TaskEvent]:
        """The step's events as gRPC's messages (RunTasks: the request carries the step's
        credential itself)."""
        events = self.events(start, inputs)
        try:
            async for item in events:
                yield to_event(item)
        finally:
            await events.aclose()

    async def events(
        self,
        start: pb.RunTasksRequest,
        inputs: AsyncIterator[pb.TaskInput],
        check: Callable[[str], bool] | None = None,
    ) -> AsyncGenerator[Started | Chunk]:
        """The step's events. ``check`` says whether the caller proved the step's
        credential (the task stream: a proof bound to its connection); without it the
        request must carry the credential itself (gRPC's RunTasks)."""
        job, step, credential = await self.verify(start.job.job_id, start.step.step_id)
        if check is None:
            check = lambda cred: hmac.compare_digest(cred, start.step_credential)  # noqa: E731
        if not credential or not check(credential):
            raise LaunchError(
                f"step {job.job_id}.{step.step_id}: the step credential does not match "
                "(only the srun that created the step may start its tasks)"
            )
        start.job.CopyFrom(job)
        start.step.CopyFrom(step)
        here = next((n for n in step.nodes if n.node == start.node), None)
        if here is None or start.node != self.node_name:
            raise LaunchError(f"step {job.job_id}.{step.step_id} has no tasks on {self.node_name}")
        key = (job.job_id, step.step_id)
        await self._let_earlier_run_end(key, job.restart_count)
        if key in self.steps:
            raise LaunchError(f"step {job.job_id}.{step.step_id} already runs on this node")
        timeout = stall.timeout_for(job, self.noded.progress_timeout_s)
        running = RunningStep(job.job_id, step.step_id, job.restart_count, timeout)
        running.credential = credential
        running.stdin_ranks = set(start.stdin_ranks)
        self.steps[key] = running
        try:
            holder = step_holder(job.restart_count, step.step_id)
            running.supervisor = await self.supervisors.take(job.job_id, holder)
            running.port = start.master_port or taskio.free_port(start.master_addr or "0.0.0.0")
            await self.starter.start_all(start, here, running.port, running, running.supervisor)
            start.step_credential = credential  # kept root-only: a resume is proven with it
            self.starter.started(start, running)
            running.warning = self.arm_warning(job, running)
            yield Started(running.port, [t.process.pid for t in running.tasks])
            self.watch(running)
            async for item in self._serve(running, inputs):
                yield item
        finally:
            if not self.detaching:  # noded stopping: the step runs on, to be resumed
                await self.end(running)

    async def resume(
        self,
        job_id: int,
        step_id: int,
        node: str,
        check: Callable[[str], bool],
        inputs: AsyncIterator[pb.TaskInput],
    ) -> AsyncGenerator[Started | Chunk]:
        """srun back after its stream broke (this noded took the step over from an
        earlier one): proven with the step's credential as recorded (ctld may be away
        too), the step's output goes on where the pipes hold it."""
        running = self.steps.get((job_id, step_id))
        if running is None or node != self.node_name or running.ended.is_set():
            raise LaunchError(
                f"step {job_id}.{step_id} runs no tasks on {self.node_name} "
                "(its noded restarted and could not take it over)"
            )
        if not running.credential or not check(running.credential):
            raise LaunchError(f"step {job_id}.{step_id}: the step credential does not match")
        if running.attached:
            raise LaunchError(f"step {job_id}.{step_id} is served to another srun connection")
        if running.resume_timer is not None:
            running.resume_timer.cancel()
            running.resume_timer = None
        log.info("srun resumed its step", job_id=job_id, step_id=step_id, node=self.node_name)
        try:
            yield Started(running.port, [t.process.pid for t in running.tasks])
            async for item in self._serve(running, inputs):
                yield item
        finally:
            if not self.detaching:
                await self.end(running)

    def watch(self, running: RunningStep) -> None:
        """Read every task's pipes into the step's queue (its exit after its output)."""

        def exited(rank: int, rc: int) -> tuple[int, int]:
            self.handle(running, TaskExited(rank, rc))
            return running.exits[rank]

        running.pending = len(running.tasks)
        for task in running.tasks:
            running.workers.append(asyncio.create_task(taskio.watch(task, running.queue, exited)))
            if task.rank not in running.stdin_ranks:
                taskio.close_gate(task)

    async def _serve(
        self, running: RunningStep, inputs: AsyncIterator[pb.TaskInput]
    ) -> AsyncGenerator[Chunk]:
        """One srun connection's part: the queue's output and exits out, its input in."""
        running.attached = True
        feeder = asyncio.create_task(
            taskio.feed(inputs, running.tasks, running.stdin_ranks, running.signal)
        )
        try:
            while running.pending:
                event = await running.queue.get()
                if event is None:
                    running.pending -= 1
                    continue
                running.listeners.publish(event)
                yield event
            # srun half-closes once it has every exit from here; ending first would
            # race its last writes (bounded: an srun that never does is not waited for)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(feeder), HALF_CLOSE_WAIT_S)
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            running.attached = False

    async def end(self, running: RunningStep) -> None:
        """The step is over here (its tasks ended and srun has them, or srun went away):
        what is left is killed and reaped, and everything of it goes."""
        job_id, step_id = running.job_id, running.step_id
        for timer in (running.warning, running.resume_timer, running.kill_task):
            if timer is not None:
                timer.cancel()
        for w in running.workers:
            w.cancel()
        await asyncio.gather(*running.workers, return_exceptions=True)  # before gates close
        self.handle(running, StepOver())  # srun went away, or leftovers of ended tasks
        await self._reap(running)
        if self.containers is not None:  # its unnamed container goes (after a save)
            await self.containers.step_done(job_id, step_id)
        for task in running.tasks:
            taskio.close_all(task)
            if running.supervisor is not None:  # its exit is had: the supervisor lets go
                await running.supervisor.forget(task.key)
        await self.supervisors.release(job_id, step_holder(running.run, step_id))
        self.steps.pop((job_id, step_id), None)
        running.listeners.close()
        if self.spool_dir:  # its tasks are gone: nothing left for a new noded to kill
            records.remove_step(self.spool_dir, job_id, step_id)
        running.ended.set()
        for task in running.tasks:
            if task.progress:
                with contextlib.suppress(OSError):
                    os.unlink(task.progress)
        self.handle(running, StepGone(len(running.tasks)))

    def keep(self, task: asyncio.Task[None]) -> None:
        """A task of the runner's own (held until done)."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def detach(self) -> None:
        """noded stops: every step runs on for the next noded to take over (its
        supervisor keeps its tasks and pipes); nothing of them is ended here."""
        self.detaching = True

    def arm_warning(self, job: pb.Job, running: RunningStep) -> Timer | None:
        """--signal=SIG@T without B: each node's step signals its own tasks then."""
        warning = warning_for(job, self.clock())
        if warning is None:
            return None
        delay, sig = warning
        return self.clock.call_later(delay, self.handle, running, StepWarnDue(sig))

    async def _reap(self, running: RunningStep) -> None:
        if running.procs is None:
            return
        for _ in range(500):  # bounded: 10 s
            if not running.procs.alive():
                return
            running.procs.signal_all(signal.SIGKILL)
            await asyncio.sleep(0.02)
        log.error("step processes survive SIGKILL", job_id=running.job_id)

    # ------------------------------------------------------------ hung ranks

    async def run_monitor(self) -> None:
        """Check every step's progress heartbeats each sample interval (of the clock)."""
        while True:
            await self.clock.sleep(self.noded.sample_interval_s)
            try:
                self.check_progress(self.clock())
            except Exception:
                log.exception("step progress check failed")

    def check_progress(self, now: float) -> list[str]:
        """Read the age of each live task's progress file (and sample the GPUs of a task
        that could be stalled); the machine names the stalled task, if any, to ctld.
        Returns the details reported."""
        found: list[str] = []
        for running in list(self.steps.values()):
            if not running.watched():
                continue  # not watched, or reported already
            silent: list[Silence] = []
            for task in running.tasks:
                if not task.progress or task.process.returncode is not None:
                    continue
                if task.rank in running.exits:
                    continue
                age = progress.silent_for(task.progress, now)
                if age is not None and running.could_stall(age):
                    silent.append(Silence(task.rank, age, self._gpus_busy(task, running)))
            if silent and self.handle(running, Silent(tuple(silent))):
                found.append(running.stall)
        return found

    def _gpus_busy(self, task: Task, running: RunningStep) -> bool:
        """The task's GPUs at work: slow, not hung (a task without GPUs: never busy)."""
        if not task.gpus or self.gpus is None:
            return False
        pids = running.procs.pids() if running.procs is not None else {task.process.pid}
        try:
            samples = self.gpus.sample(task.gpus, pids)
        except Exception:
            log.warning("GPU sample failed: the task is taken as busy", exc_info=True)
            return True
        return stall.gpus_busy([s.util_pct for s in samples], self.idle.threshold_pct)

    # ------------------------------------------------------------ from ctld

    def signal(self, job_id: int, step_id: int | None, sig: int, run: int | None = None) -> bool:
        found = False
        for running in list(self.steps.values()):
            if running.takes(job_id, step_id, run):  # not an earlier (or later) run's
                running.signal(sig)
                found = True
        return found

    def job_ids(self) -> set[int]:
        return {jid for jid, _ in self.steps}

    async def _let_earlier_run_end(self, key: tuple[int, int], run: int) -> None:
        """The same step of a requeued job's earlier run may still be ending here (its
        kill can trail the new run's start): it is killed, and waited for, first."""
        earlier = self.steps.get(key)
        if earlier is None or earlier.run >= run:
            return
        log.info("earlier run's step superseded", job_id=key[0], step_id=key[1], run=earlier.run)
        if not earlier.kill_armed:
            self.terminate_job(key[0], SUPERSEDED_KILL_WAIT_S, earlier.run)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(earlier.ended.wait(), SUPERSEDED_END_WAIT_S)

    def terminate_job(
        self, job_id: int, kill_wait_s: float, run: int | None = None, *, job_here: bool = True
    ) -> bool:
        """The job ends: its steps here get SIGCONT+SIGTERM, SIGKILL after kill_wait_s.
        Without its batch script here (``job_here`` False), its containers go once its
        steps have (the launcher's cleanup does it where the batch script ran)."""
        found = False
        for running in list(self.steps.values()):
            if running.takes(job_id, None, run):
                found = True
                self.handle(running, Terminate(kill_wait_s))
        if not job_here and self.containers is not None:
            self.keep(asyncio.create_task(self._containers_gone(job_id, kill_wait_s)))
        return found

    async def _containers_gone(self, job_id: int, kill_wait_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + kill_wait_s + SUPERSEDED_END_WAIT_S
        while job_id in self.job_ids() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)  # each step's own end is awaited by its stream
        if self.containers is not None and job_id not in self.job_ids():
            await self.containers.job_done(job_id)

    async def shutdown(self) -> None:
        for running in list(self.steps.values()):
            running.signal(signal.SIGKILL)
