"""Job steps on this node: srun's tasks, their I/O streamed back, their signals and exits.

One RunTasks stream per node of a step. Each task starts as the job's user through
the same gate as a batch script (its stdin pipe is the gate: noded writes one line to
release it, then srun's input follows). Output goes back in chunks, in order per
task; a bounded queue between the pipe readers and the stream makes a slow srun slow
the tasks down instead of losing output. A task's exit is sent only after its pipes
reached end-of-file, so nothing printed just before exiting is lost; when a background
child keeps a pipe open past DRAIN_S, the pipe is still read until empty (everything
the task wrote before it exited is in it by then), never cut mid-way. The stream ends
only after srun half-closed it (it does once it saw every exit here), so srun never
writes to a finished stream (gRPC then reports INTERNAL over the real status).

Each task gets its own progress heartbeat file (``$CORRAL_PROGRESS_FILE``, progress.py);
``check_progress`` finds a task that opted in and went silent (its GPUs idle), names
its node and rank to ctld (END_STALLED: the job is requeued) and stops the step here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hmac
import os
import signal
import socket
import struct
import termios
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from corral.config import IdleGpuConfig, NodedConfig
from corral.errors import CorralError, LaunchError
from corral.jobspec import warn_signal
from corral.tasks import task_gpus
from corral.wire import corral_pb2 as pb
from noded import progress, records
from noded.attach import Listeners
from noded.clock import Clock, RealClock, Timer
from noded.env import job_umask, step_environment
from noded.gpu import GpuBackend
from noded.spawn import identity_for, start_gated
from noded.tracking import MARKER_VAR, PROGRESS_VAR, STEP_MARKER_VAR, JobProcesses

log = structlog.get_logger("noded")

# a reader that falls behind reads bigger chunks (up to the pipe's size), so the cost
# per chunk is shared by more bytes: pipes of PIPE_BYTES, reads of up to CHUNK
CHUNK = 256 * 1024
PIPE_BYTES = 256 * 1024
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), not in Python 3.11's fcntl
DRAIN_S = 2.0  # how long after a task exits its pipes may still deliver output
QUEUE_DEPTH = 64  # chunks in flight per node before readers wait for srun (<= 16 MiB)
HALF_CLOSE_WAIT_S = 30.0  # after the last exit, how long srun has to half-close
STALL_KILL_S = 5.0  # a stalled step here: SIGTERM now, SIGKILL this much later
SUPERSEDED_KILL_WAIT_S = STALL_KILL_S  # an earlier run's step: SIGTERM, then SIGKILL
# its end, bounded: SIGKILL, the output drain and srun's half-close all fit inside
SUPERSEDED_END_WAIT_S = SUPERSEDED_KILL_WAIT_S + DRAIN_S + HALF_CLOSE_WAIT_S + 5.0
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


@dataclass
class Task:
    rank: int
    process: asyncio.subprocess.Process
    gate_fd: int
    exited: asyncio.Future[None]
    out_fds: tuple[int, int]  # read ends of its stdout and stderr pipes
    drain: asyncio.Event = field(default_factory=asyncio.Event)  # read what is there, stop
    tty: int = -1  # --pty: the terminal's master side, for input and window sizes
    progress: str = ""  # its own progress heartbeat file ("": none)
    gpus: list[int] = field(default_factory=list)  # the GPUs it sees (its idle test)


@dataclass(slots=True)
class Started:
    """The step's tasks run here: MASTER_PORT (the first node picks it) and their pids."""

    master_port: int
    pids: list[int]


@dataclass(slots=True)
class Chunk:
    """A task's output (``data``, in order per task and stream), or its exit."""

    rank: int
    stderr: bool = False
    data: bytes = b""
    exit: tuple[int, int] | None = None  # (code, signal) once it ended


def to_event(item: Started | Chunk) -> pb.TaskEvent:
    """gRPC's message for one event (RunTasks)."""
    if isinstance(item, Started):
        return pb.TaskEvent(started=pb.TasksStarted(master_port=item.master_port, pids=item.pids))
    if item.exit is not None:
        code, sig = item.exit
        return pb.TaskEvent(exit=pb.TaskExit(rank=item.rank, exit_code=code, exit_signal=sig))
    return pb.TaskEvent(output=pb.TaskOutput(rank=item.rank, stderr=item.stderr, data=item.data))


@dataclass
class RunningStep:
    job_id: int
    step_id: int
    run: int = 0  # the job's restart_count when the step started
    tasks: list[Task] = field(default_factory=list)
    exits: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (code, signal)
    procs: JobProcesses | None = None
    kill_task: asyncio.Task[None] | None = None
    stall_timeout_s: float = 0.0  # the job's progress timeout (0: not watched)
    stall: str = ""  # set once a task here was found stalled (reported once)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    listeners: Listeners = field(default_factory=Listeners)  # sattach's copies (attach.py)

    def signal(self, sig: int) -> None:
        """Each process of the step gets ``sig`` once (a task that counts its SIGUSR1s,
        or checkpoints on each, must not see two)."""
        sent = self.procs.signal_all(sig) if self.procs is not None else set()
        for task in self.tasks:  # the roots, even before the tracker has seen them
            # os.kill, not Process.send_signal: that polls first, and a poll of an exited
            # task reaps it, stealing its exit status from asyncio (it then reads 255)
            if task.process.returncode is None and task.process.pid not in sent:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(task.process.pid, sig)


def open_terminal(size: pb.WindowSize, uid: int) -> tuple[int, int, str]:
    """A pseudo-terminal of ``size`` for a --pty task: (master fd, slave fd, slave path).
    The task opens the slave again itself (so it becomes its controlling terminal): it
    must be the user's. The task inherits the slave fd as its stdout meanwhile, so the
    terminal never looks hung up before the task opened it."""
    master, slave = os.openpty()
    path = os.ttyname(slave)
    if uid >= 0:
        os.fchown(slave, uid, -1)  # by its descriptor: never a path looked up again
    set_window(master, size)
    os.set_blocking(master, False)
    return master, slave, path


def set_window(fd: int, size: pb.WindowSize) -> None:
    """TIOCSWINSZ: the kernel tells the terminal's foreground job (SIGWINCH)."""
    rows, cols = size.rows or 24, size.cols or 80
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def free_port(host: str) -> int:
    """A port free on ``host`` now (torchrun's way: bind to 0, read, close)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            sock.bind(("", 0))
        return int(sock.getsockname()[1])


Verify = Callable[[int, int], Awaitable[tuple[pb.Job, pb.Step, str]]]


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
    ) -> None:
        # progress heartbeats: each task's file lives under the spool ("": none)
        self.spool_dir = spool_dir
        self.noded = noded or NodedConfig()
        self.idle = idle or IdleGpuConfig()
        self.gpus = gpus
        self.clock: Clock = clock or RealClock()  # --signal warning, stalls (tests: ManualClock)
        # puts a task (held at its gate) into its batch job's cgroup and cores, if here
        self.contain = contain or (lambda job_id, pid: None)
        self.node_name = node_name
        # tells ctld a step's tasks here are gone, even when srun died without saying so
        self.report = report or (lambda update: None)
        self.job_marker = job_marker  # format with job_id: the batch job's marker
        # ctld's own record of the step: srun's copy could claim any user
        self.verify = verify
        self.steps: dict[tuple[int, int], RunningStep] = {}

    def marker(self, job_id: int) -> str:
        return self.job_marker.format(job_id=job_id)

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
        running = RunningStep(job.job_id, step.step_id, job.restart_count)
        running.stall_timeout_s = progress.timeout_for(job, self.noded.progress_timeout_s)
        self.steps[key] = running
        queue: asyncio.Queue[Chunk | None] = asyncio.Queue(QUEUE_DEPTH)
        workers: list[asyncio.Task[None]] = []
        warning: Timer | None = None
        try:
            port = start.master_port or free_port(start.master_addr or "0.0.0.0")
            await self._spawn_all(start, here, port, running)
            warning = self._arm_warning(job, running)
            yield Started(port, [t.process.pid for t in running.tasks])
            stdin_ranks = set(start.stdin_ranks)
            for task in running.tasks:
                workers.append(asyncio.create_task(self._watch(task, running, queue)))
                if task.rank not in stdin_ranks:
                    self._close_gate(task)
            feeder = asyncio.create_task(self._feed(inputs, running, stdin_ranks))
            workers.append(feeder)
            pending = len(running.tasks)
            while pending:
                event = await queue.get()
                if event is None:
                    pending -= 1
                    continue
                running.listeners.publish(event)
                yield event
            # srun half-closes once it has every exit from here; ending first would
            # race its last writes (bounded: an srun that never does is not waited for)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(feeder), HALF_CLOSE_WAIT_S)
        finally:
            if warning is not None:
                warning.cancel()
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)  # before gates close
            if running.kill_task is not None:
                running.kill_task.cancel()
            running.signal(signal.SIGKILL)  # srun went away, or leftovers of ended tasks
            await self._reap(running)
            for task in running.tasks:
                self._close_gate(task)
                for fd in task.out_fds:  # a task whose watcher never started
                    if fd >= 0:
                        os.close(fd)
                task.out_fds = (-1, -1)
                if task.tty >= 0:
                    os.close(task.tty)
                    task.tty = -1
            self.steps.pop(key, None)
            running.listeners.close()
            if self.spool_dir:  # its tasks are gone: nothing left for a new noded to kill
                records.remove_step(self.spool_dir, job.job_id, step.step_id)
            running.ended.set()
            for task in running.tasks:
                if task.progress:
                    with contextlib.suppress(OSError):
                        os.unlink(task.progress)
            codes = [c for c, sig in running.exits.values() if not sig]
            signals = [sig for _, sig in running.exits.values() if sig]
            # a task whose end was never seen was killed by the cleanup above
            unfinished = int(signal.SIGKILL) if len(running.exits) < len(running.tasks) else 0
            self.report(
                pb.JobStatusUpdate(
                    job_id=job.job_id,
                    step_id=step.step_id,
                    kind=pb.JobStatusUpdate.KIND_STEP_ENDED,
                    time=time.time(),
                    exit_code=max(codes, default=0),
                    exit_signal=signals[0] if signals else unfinished,
                )
            )

    async def _spawn_all(
        self, start: pb.RunTasksRequest, here: pb.StepNode, port: int, running: RunningStep
    ) -> None:
        job, step = start.job, start.step
        who = identity_for(job, self.node_name)
        step_marker = f"{self.marker(job.job_id)}.{step.step_id}"
        # before any task: a spawn that fails half-way still has its started tasks found
        running.procs = JobProcesses(-1, step_marker, None, STEP_MARKER_VAR, uid=who.uid)
        self._record(records.StepState(job.job_id, step.step_id, step_marker, who.uid, time.time()))
        master = start.master_addr or "127.0.0.1"
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
            env[MARKER_VAR] = self.marker(job.job_id)
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
            shim = [TASK_SHIM, "corral-task", mask, start.cwd or "/"]
            if rank == 0 and start.HasField("pty"):
                tty, stdout, pts = open_terminal(start.pty, who.uid if who.pw else -1)
                shim = [PTY_SHIM, "corral-task", mask, start.cwd or "/", pts]
            try:
                proc, write_fd, exited = await start_gated(
                    [*shim, *step.spec.argv],
                    who=who,
                    env=env,
                    stdout=stdout,
                    stderr=err_w,
                    what=f"task {rank}",
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
            running.tasks.append(
                Task(
                    rank,
                    proc,
                    write_fd,
                    exited,
                    (out_r, err_r),
                    tty=tty,
                    progress=beat,
                    gpus=list(gpus),
                )
            )
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

    def _arm_warning(self, job: pb.Job, running: RunningStep) -> Timer | None:
        """--signal=SIG@T without B: reaches the steps (not the batch shell) T seconds
        before the time limit; each node's step signals its own tasks then."""
        if job.time_limit_s <= 0 or not job.start_time:
            return None
        try:
            warn = warn_signal(job.spec)
        except CorralError:
            return None
        if warn is None or warn.batch_only:
            return None
        delay = job.start_time + job.time_limit_s - warn.seconds - self.clock.now()
        if delay <= 0:
            return None  # a step started after the warning: Slurm sends it once

        def fire() -> None:
            log.info("signalling the step before the time limit", job_id=job.job_id)
            running.signal(warn.signal)

        return self.clock.call_later(delay, fire)

    @staticmethod
    def _close_gate(task: Task) -> None:
        if task.gate_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(task.gate_fd)
            task.gate_fd = -1

    async def _watch(
        self, task: Task, running: RunningStep, queue: asyncio.Queue[Chunk | None]
    ) -> None:
        (out_fd, err_fd), task.out_fds = task.out_fds, (-1, -1)  # closed here
        pumps = asyncio.gather(
            self._pump(task, out_fd, False, queue), self._pump(task, err_fd, True, queue)
        )
        try:
            await task.exited
            done, _ = await asyncio.wait({pumps}, timeout=DRAIN_S)
            if not done:
                # a background child still holds the pipes: the task has ended all the
                # same (Slurm's rule; the child dies with the step). What it wrote is in
                # the pipes: read them to empty, then stop
                task.drain.set()
                await pumps
        finally:
            if not pumps.done():  # srun went away: nobody reads the queue any more
                pumps.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pumps
            os.close(out_fd)
            os.close(err_fd)
        rc = task.process.returncode
        assert rc is not None  # set when it exited
        code, sig = (0, -rc) if rc < 0 else (rc, 0)
        running.exits[task.rank] = (code, sig)
        await queue.put(Chunk(task.rank, exit=(code, sig)))
        await queue.put(None)

    @staticmethod
    async def _pump(task: Task, fd: int, is_err: bool, queue: asyncio.Queue[Chunk | None]) -> None:
        """Send what the pipe gives until end-of-file, or until it is empty once the task
        is being drained. Never cancelled mid-chunk: a chunk read is a chunk sent."""
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable.set)
        wake = asyncio.ensure_future(task.drain.wait())
        wake.add_done_callback(lambda _: readable.set())
        try:
            while True:
                try:
                    chunk = os.read(fd, CHUNK)
                except BlockingIOError:
                    if task.drain.is_set():
                        return
                    readable.clear()
                    await readable.wait()
                    continue
                except OSError as exc:  # a terminal whose other side all closed: EIO
                    if exc.errno == errno.EIO:
                        return
                    raise
                if not chunk:
                    return
                await queue.put(Chunk(task.rank, is_err, chunk))
        finally:
            wake.cancel()
            loop.remove_reader(fd)

    async def _feed(
        self, inputs: AsyncIterator[pb.TaskInput], running: RunningStep, stdin_ranks: set[int]
    ) -> None:
        readers = [t for t in running.tasks if t.rank in stdin_ranks]
        async for item in inputs:
            what = item.WhichOneof("what")
            if what == "stdin":
                for task in readers:
                    if task.tty >= 0:
                        with contextlib.suppress(OSError):
                            await asyncio.to_thread(os.write, task.tty, item.stdin)
                    elif task.gate_fd >= 0:
                        try:
                            await asyncio.to_thread(os.write, task.gate_fd, item.stdin)
                        except OSError:
                            self._close_gate(task)  # it stopped reading: fine
            elif what == "stdin_eof":
                for task in readers:
                    self._close_gate(task)
            elif what == "signal" and 0 < item.signal < signal.NSIG:
                running.signal(item.signal)
            elif what == "window":
                for task in running.tasks:
                    if task.tty >= 0:
                        set_window(task.tty, item.window)

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
        """Check every step's progress heartbeats each sample interval."""
        while True:
            await asyncio.sleep(self.noded.sample_interval_s)
            try:
                self.check_progress(self.clock.now())
            except Exception:
                log.exception("step progress check failed")

    def check_progress(self, now: float) -> list[str]:
        """Find steps with a task that opted in (touched its file) and then went silent for
        the job's stall timeout while its GPUs idle. The most silent such task here is
        named (it stopped first: ranks that wait on it in a collective fall silent
        later); ctld hears END_STALLED with the node and rank, and requeues the job.
        Returns the details reported."""
        found: list[str] = []
        for running in list(self.steps.values()):
            timeout = running.stall_timeout_s
            if timeout <= 0 or running.stall:
                continue
            worst: tuple[float, Task] | None = None
            for task in running.tasks:
                if not task.progress or task.process.returncode is not None:
                    continue
                if task.rank in running.exits:
                    continue
                silent = progress.silent_for(task.progress, now)
                if silent is None or silent < timeout or self._gpus_busy(task, running):
                    continue
                if worst is None or silent > worst[0]:
                    worst = (silent, task)
            if worst is None:
                continue
            silent, task = worst
            what = f"step {running.job_id}.{running.step_id}"
            running.stall = progress.stall_detail(self.node_name, task.rank, what, silent)
            log.error(
                "step task stalled: the job is to be requeued",
                job_id=running.job_id,
                step_id=running.step_id,
                node=self.node_name,
                rank=task.rank,
                silent_s=round(silent),
            )
            self.report(
                pb.JobStatusUpdate(
                    job_id=running.job_id,
                    step_id=running.step_id,
                    kind=pb.JobStatusUpdate.KIND_EXITED,
                    end_reason=pb.JobStatusUpdate.END_STALLED,
                    time=time.time(),
                    exit_signal=int(signal.SIGKILL),
                    restart_count=running.run,
                    detail=running.stall,
                )
            )
            # ctld kills every part of the job at once; this covers a ctld away meanwhile
            running.signal(signal.SIGCONT)
            running.signal(signal.SIGTERM)
            if running.kill_task is None:
                running.kill_task = asyncio.create_task(self._kill_after(running, STALL_KILL_S))
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
        return progress.gpus_busy([s.util_pct for s in samples], self.idle.threshold_pct)

    # ------------------------------------------------------------ from ctld

    def signal(self, job_id: int, step_id: int | None, sig: int, run: int | None = None) -> bool:
        found = False
        for (jid, sid), running in list(self.steps.items()):
            if run is not None and running.run != run:
                continue  # an earlier (or later) run of a requeued job
            if jid == job_id and (step_id is None or sid == step_id):
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
        if earlier.kill_task is None:
            self.terminate_job(key[0], SUPERSEDED_KILL_WAIT_S, earlier.run)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(earlier.ended.wait(), SUPERSEDED_END_WAIT_S)

    def terminate_job(self, job_id: int, kill_wait_s: float, run: int | None = None) -> bool:
        """The job ends: its steps here get SIGCONT+SIGTERM, SIGKILL after kill_wait_s."""
        found = False
        for (jid, _), running in list(self.steps.items()):
            if jid != job_id or (run is not None and running.run != run):
                continue
            found = True
            running.signal(signal.SIGCONT)
            running.signal(signal.SIGTERM)
            if running.kill_task is None:
                running.kill_task = asyncio.create_task(self._kill_after(running, kill_wait_s))
        return found

    @staticmethod
    async def _kill_after(running: RunningStep, wait_s: float) -> None:
        await asyncio.sleep(max(wait_s, 0.0))
        running.signal(signal.SIGKILL)

    async def shutdown(self) -> None:
        for running in list(self.steps.values()):
            running.signal(signal.SIGKILL)
