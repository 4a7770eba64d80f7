"""A step's tasks' I/O on this node: pipes read into the stream, srun's input written.

Output goes back in chunks, in order per task; a bounded queue between the pipe readers
and the stream makes a slow srun slow the tasks down instead of losing output. A task's
exit is sent only after its pipes reached end-of-file, so nothing printed just before
exiting is lost; when a background child keeps a pipe open past DRAIN_S, the pipe is
still read until empty (everything the task wrote before it exited is in it by then),
never cut mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import socket
import struct
import termios
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from corral.clock import Timer
from corral.wire import corral_pb2 as pb
from noded.attach import Listeners
from noded.core.stepmachine import StepState
from noded.supervisor import SupervisedProcess, Supervisor
from noded.tracking import JobProcesses

# a reader that falls behind reads bigger chunks (up to the pipe's size), so the cost
# per chunk is shared by more bytes: pipes of PIPE_BYTES, reads of up to CHUNK
CHUNK = 256 * 1024
PIPE_BYTES = 256 * 1024
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), not in Python 3.11's fcntl
DRAIN_S = 2.0  # how long after a task exits its pipes may still deliver output
QUEUE_DEPTH = 64  # chunks in flight per node before readers wait for srun (<= 16 MiB)


@dataclass
class Task:
    rank: int
    process: SupervisedProcess  # its supervisor's child (supervise.py), never noded's
    gate_fd: int
    exited: asyncio.Future[None]
    out_fds: tuple[int, int]  # read ends of its stdout and stderr pipes
    drain: asyncio.Event = field(default_factory=asyncio.Event)  # read what is there, stop
    tty: int = -1  # --pty: the terminal's master side, for input and window sizes
    progress: str = ""  # its own progress heartbeat file ("": none)
    gpus: list[int] = field(default_factory=list)  # the GPUs it sees (its idle test)
    supervisor: Supervisor | None = None  # keeps copies of its pipes' noded ends
    key: str = ""  # its name there


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


@dataclass
class RunningStep(StepState):
    """The runner's record of a step here: the machine's state and the step's processes."""

    tasks: list[Task] = field(default_factory=list)
    procs: JobProcesses | None = None
    kill_task: Timer | None = None  # its SIGKILL, due after a grace
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    listeners: Listeners = field(default_factory=Listeners)  # sattach's copies (attach.py)
    # the step's session, which outlives one srun connection (a noded restart resumes)
    credential: str = ""  # ctld's step credential: a resuming srun proves it
    port: int = 0  # MASTER_PORT
    stdin_ranks: set[int] = field(default_factory=set)
    queue: asyncio.Queue[Chunk | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_DEPTH))
    pending: int = 0  # tasks whose output and exit are not all sent yet
    workers: list[asyncio.Task[None]] = field(default_factory=list)  # the pipes' readers
    warning: Timer | None = None  # --signal's warning
    supervisor: Supervisor | None = None
    attached: bool = False  # an srun connection serves it now
    resume_timer: Timer | None = None  # a step taken over: ended if srun does not resume
    since: float = 0.0  # its record made, before any of its tasks started

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


def to_event(item: Started | Chunk) -> pb.TaskEvent:
    """gRPC's message for one event (RunTasks)."""
    if isinstance(item, Started):
        return pb.TaskEvent(started=pb.TasksStarted(master_port=item.master_port, pids=item.pids))
    if item.exit is not None:
        code, sig = item.exit
        return pb.TaskEvent(exit=pb.TaskExit(rank=item.rank, exit_code=code, exit_signal=sig))
    return pb.TaskEvent(output=pb.TaskOutput(rank=item.rank, stderr=item.stderr, data=item.data))


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


_dropping: set[asyncio.Task[None]] = set()


def close_gate(task: Task) -> None:
    """The task's stdin ends: noded's copy of its write end, and the supervisor's."""
    if task.gate_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(task.gate_fd)
        task.gate_fd = -1
        if task.supervisor is not None and task.supervisor.alive():
            drop = asyncio.get_running_loop().create_task(task.supervisor.drop(task.key, "gate"))
            _dropping.add(drop)
            drop.add_done_callback(_dropping.discard)


def close_all(task: Task) -> None:
    """Every descriptor noded still holds of the task (its watcher may never have run)."""
    close_gate(task)
    for fd in task.out_fds:
        if fd >= 0:
            os.close(fd)
    task.out_fds = (-1, -1)
    if task.tty >= 0:
        os.close(task.tty)
        task.tty = -1


async def watch(
    task: Task, queue: asyncio.Queue[Chunk | None], exited: Callable[[int, int], tuple[int, int]]
) -> None:
    """Send the task's output, then its exit (``exited(rank, rc)``: its code and signal),
    then None: only once its pipes are read to the end, so nothing it printed is lost."""
    (out_fd, err_fd), task.out_fds = task.out_fds, (-1, -1)  # closed here
    pumps = asyncio.gather(_pump(task, out_fd, False, queue), _pump(task, err_fd, True, queue))
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
    await queue.put(Chunk(task.rank, exit=exited(task.rank, rc)))
    await queue.put(None)


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


async def feed(
    inputs: AsyncIterator[pb.TaskInput],
    tasks: list[Task],
    stdin_ranks: set[int],
    send_signal: Callable[[int], None],
) -> None:
    """srun's input to the tasks: stdin (to the ranks that read it), signals, window sizes."""
    readers = [t for t in tasks if t.rank in stdin_ranks]
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
                        close_gate(task)  # it stopped reading: fine
        elif what == "stdin_eof":
            for task in readers:
                close_gate(task)
        elif what == "signal" and 0 < item.signal < signal.NSIG:
            send_signal(item.signal)
        elif what == "window":
            for task in tasks:
                if task.tty >= 0:
                    set_window(task.tty, item.window)
