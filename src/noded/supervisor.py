"""noded's end of a job's supervisor (supervise.py): start one, attach to one, and the
processes it started, as the part of ``asyncio.subprocess.Process`` noded uses.

A job's processes are the supervisor's children, never noded's: a noded that dies,
stops or is replaced by a new version leaves them running with their exit statuses
kept, and the next noded attaches (``Supervisor.attach``) through the socket its
records name. Signals still go from noded straight to the processes (it is root and
tracks them: tracking.py); the supervisor only starts, reaps and keeps descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

import structlog

from corral.errors import LaunchError
from noded import records, supproto

log = structlog.get_logger("noded")

REQUEST_TIMEOUT_S = 30.0  # a spawn as another user may wait on NSS


@dataclass
class SupervisedProcess:
    """A process a supervisor started (the batch shell, or one task of a step)."""

    key: str
    pid: int
    created: float
    returncode: int | None = None  # asyncio's convention: -N for signal N
    status: int | None = None  # the raw wait status
    rusage: dict[str, float] = field(default_factory=dict)
    exited: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def wait(self) -> int:
        await asyncio.shield(self.exited)
        assert self.returncode is not None
        return self.returncode

    def ended(self, status: int | None, rusage: dict[str, float]) -> None:
        """Its exit (``status`` None: its supervisor is gone, and with it the status)."""
        if self.exited.done():
            return
        self.status = status
        self.returncode = (
            os.waitstatus_to_exitcode(status) if status is not None else -int(signal.SIGKILL)
        )
        self.rusage = rusage
        self.exited.set_result(None)


@dataclass(frozen=True)
class Found:
    """A child an attach found: its process (ended or not) and the descriptors kept."""

    process: SupervisedProcess
    fds: dict[str, int]


class Supervisor:
    def __init__(self, sock: socket.socket, pid: int, path: str) -> None:
        self.sock = sock
        self.pid = pid
        self.path = path  # its socket: what a later noded attaches through
        self.processes: dict[str, SupervisedProcess] = {}
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tuple[dict[str, Any], list[int]]]] = {}
        # started by this noded: its child, reaped here once it closes its end (a later
        # noded is not its parent: init reaps it then)
        self.child = False
        sock.setblocking(False)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)

    # ------------------------------------------------------------ making one

    @classmethod
    async def start(cls, spool: str, job_id: int) -> Supervisor:
        """A new supervisor for ``job_id`` on this node, in a session of its own."""
        directory = socket_dir(spool)
        path = os.path.join(directory, f"job{job_id:08d}-{secrets.token_hex(4)}.sock")
        mine, theirs = supproto.socket_pair()
        try:
            pid = _spawn(path, theirs.fileno())
        except OSError as exc:
            mine.close()
            raise LaunchError(f"cannot start the job's supervisor: {exc.strerror}") from None
        finally:
            theirs.close()
        sup = cls(mine, pid, path)
        sup.child = True
        await sup._ask({"op": "ping"})  # it listens at ``path`` once it answers
        return sup

    @classmethod
    async def attach(cls, path: str, pid: int) -> tuple[Supervisor, list[Found]] | None:
        """The supervisor at ``path`` (its pid from noded's record), with what it holds;
        None if it is gone, or is not the process the record names."""
        try:
            sock = await asyncio.to_thread(supproto.connect, path)
        except OSError:
            return None
        their_pid, uid, _ = supproto.peer(sock)
        if uid not in (0, os.geteuid()) or their_pid != pid:
            log.error("a supervisor socket answered by another process", path=path, pid=their_pid)
            sock.close()
            return None
        sup = cls(sock, pid, path)
        try:
            reply, fds = await sup._ask({"op": "attach"})
        except (LaunchError, OSError):
            sup.detach()
            return None
        found: list[Found] = []
        at = 0
        for raw in reply.get("children", []):
            names = [str(n) for n in raw.get("keep", [])]
            kept = dict(zip(names, fds[at : at + len(names)], strict=True))
            at += len(names)
            proc = SupervisedProcess(str(raw["key"]), int(raw["pid"]), float(raw["created"]))
            if raw.get("status") is not None:
                proc.ended(int(raw["status"]), dict(raw.get("rusage") or {}))
            sup.processes[proc.key] = proc
            found.append(Found(proc, kept))
        return sup, found

    # ------------------------------------------------------------ requests

    async def spawn(
        self,
        key: str,
        argv: list[str],
        *,
        env: dict[str, str],
        uid: int,
        gid: int,
        groups: list[int],
        stdio: tuple[int, int, int],
        keep: dict[str, int] | None = None,
    ) -> SupervisedProcess:
        """Start ``argv`` as ``uid`` in a session of its own, its stdin, stdout and stderr
        ``stdio`` (noded keeps its own copies: the caller closes them); ``keep``: more
        descriptors the supervisor holds for a later noded (their names)."""
        keep = keep or {}
        message = {
            "op": "spawn",
            "key": key,
            "argv": argv,
            "env": env,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "keep": list(keep),
        }
        reply, extra = await self._ask(message, [*stdio, *keep.values()])
        supproto.close_all(extra)
        proc = SupervisedProcess(key, int(reply["pid"]), float(reply["created"]))
        self.processes[key] = proc
        return proc

    async def drop(self, key: str, *names: str) -> None:
        """The supervisor's copies of these descriptors of ``key`` go (a stdin at EOF)."""
        with contextlib.suppress(LaunchError, OSError):
            await self._ask({"op": "drop", "key": key, "names": list(names)})

    async def forget(self, key: str) -> None:
        self.processes.pop(key, None)
        with contextlib.suppress(LaunchError, OSError):
            await self._ask({"op": "forget", "key": key})

    async def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(LaunchError, OSError):
            await self._ask({"op": "kill", "signal": int(sig)})

    async def close(self) -> None:
        """It exits once nothing of the job runs; this noded lets go of it."""
        with contextlib.suppress(LaunchError, OSError):
            await self._ask({"op": "close"})
        self.detach()

    def detach(self) -> None:
        """Let go of the connection (the supervisor goes on)."""
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()
        self._lost("noded let go")

    def alive(self) -> bool:
        return not self.gone.done()

    async def exited(self, timeout: float) -> bool:
        """Wait for the supervisor process to exit, if this noded started it (its child:
        reaped here); True once it has."""
        if not self.child:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._reap():
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def _reap(self) -> bool:
        """Reap the supervisor if it is this noded's child and has exited."""
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return True  # reaped already, or not ours
        return pid != 0

    async def _ask(
        self, message: dict[str, Any], fds: list[int] | None = None
    ) -> tuple[dict[str, Any], list[int]]:
        if self.gone.done():
            raise LaunchError("the job's supervisor is gone")
        ident = next(self._ids)
        waiter: asyncio.Future[tuple[dict[str, Any], list[int]]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[ident] = waiter
        try:
            supproto.send(self.sock, {**message, "id": ident}, fds)
            reply, got = await asyncio.wait_for(asyncio.shield(waiter), REQUEST_TIMEOUT_S)
        except TimeoutError:
            raise LaunchError("the job's supervisor did not answer") from None
        finally:
            self._waiting.pop(ident, None)
        if "error" in reply:
            supproto.close_all(got)
            raise LaunchError(f"the job's supervisor: {reply['error']}")
        return reply, got

    # ------------------------------------------------------------ what it says

    def _readable(self) -> None:
        while True:
            try:
                got = supproto.receive(self.sock)
            except BlockingIOError:
                return
            except (OSError, supproto.ProtocolError) as exc:
                log.error("supervisor connection broken", pid=self.pid, error=str(exc))
                got = None
            if got is None:
                with contextlib.suppress(ValueError, RuntimeError):
                    asyncio.get_running_loop().remove_reader(self.sock.fileno())
                self._lost("the supervisor is gone")
                return
            message, fds = got
            if message.get("event") == "exit":
                supproto.close_all(fds)
                proc = self.processes.get(str(message.get("key")))
                if proc is not None:
                    proc.ended(int(message["status"]), dict(message.get("rusage") or {}))
                continue
            waiter = self._waiting.get(int(message.get("id") or 0))
            if waiter is not None and not waiter.done():
                waiter.set_result((message, fds))
            else:
                supproto.close_all(fds)

    def _lost(self, why: str) -> None:
        if self.gone.done():
            return
        self.gone.set_result(None)
        if self.child and why != "noded let go":  # it exits as its socket closes
            asyncio.get_running_loop().create_task(self.exited(10.0))
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(LaunchError(f"the job's supervisor: {why}"))
        if why != "noded let go":  # its children's statuses died with it
            for proc in self.processes.values():
                if proc.returncode is None:
                    log.error("supervisor gone under a running process", key=proc.key, pid=proc.pid)
                    proc.ended(None, {})


def _spawn(path: str, fd: int) -> int:
    """``python -m noded.supervise PATH FD`` in a session of its own (noded's signals and
    its group's are not its), its stdin and stdout /dev/null, ``fd`` its end of the pair.
    posix_spawn, not asyncio's subprocess: nothing of asyncio watches it, so a noded that
    exits leaves it running with no transport to close (and nothing kills it then)."""
    os.set_inheritable(fd, True)
    try:
        return os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "noded.supervise", path, str(fd)],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            ],
            setsid=True,
        )
    finally:
        os.set_inheritable(fd, False)


def socket_dir(spool: str) -> str:
    """``<spool>/state/sup``: root's alone, as the records beside it."""
    directory = os.path.join(records.state_dir(spool), supproto.SOCKET_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.lstat(directory)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.chmod(directory, 0o700)
    return directory


class JobSupervisors:
    """One supervisor per job on this node, shared by its batch run and its steps here:
    started by the first of them, closed when the last lets go (``holders``)."""

    def __init__(self, spool: str) -> None:
        self.spool = spool
        self.by_job: dict[int, Supervisor] = {}
        self.holders: dict[int, set[str]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def take(self, job_id: int, holder: str) -> Supervisor:
        """The job's supervisor (started if it has none that lives), held by ``holder``."""
        lock = self._locks.setdefault(job_id, asyncio.Lock())
        async with lock:
            sup = self.by_job.get(job_id)
            if sup is None or not sup.alive():
                sup = await Supervisor.start(self.spool, job_id)
                self.by_job[job_id] = sup
                self.holders[job_id] = set()
            self.holders[job_id].add(holder)
            return sup

    def adopt(self, job_id: int, sup: Supervisor, holder: str) -> None:
        """An attached supervisor (recovery), held by ``holder``."""
        if self.by_job.get(job_id) is not sup:
            self.by_job[job_id] = sup
            self.holders[job_id] = set()
        self.holders[job_id].add(holder)

    def get(self, job_id: int) -> Supervisor | None:
        return self.by_job.get(job_id)

    async def release(self, job_id: int, holder: str) -> None:
        """``holder`` is done; the last one's release closes the supervisor."""
        held = self.holders.get(job_id)
        if held is None:
            return
        held.discard(holder)
        if held:
            return
        sup = self.by_job.pop(job_id, None)
        self.holders.pop(job_id, None)
        self._locks.pop(job_id, None)
        if sup is not None:
            await sup.close()

    def detach_all(self) -> None:
        """noded stops: every supervisor goes on without it (a later noded attaches)."""
        for sup in self.by_job.values():
            sup.detach()
        self.by_job.clear()
        self.holders.clear()
