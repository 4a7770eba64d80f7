"""A job's supervisor on this node: the parent of its processes, keeper of their exit
statuses and of the pipes srun's stream reads, across noded's restarts.

slurmstepd's role, and containerd's shims': noded starts one supervisor per job on a
node (``python -m noded.supervise SOCKET FD``) in a session of its own, and asks it to
start the job's batch shell and its step tasks (``spawn``). The supervisor is their
parent, so their exit statuses (and rusage) come to it, not to noded; it keeps a copy of
each descriptor noded names (a task's output pipes, its stdin, a terminal), so a task
never sees its reader vanish while noded is away. A new noded (crashed, restarted,
upgraded) connects to the socket noded's records name, ``attach``es, gets every child
with its status so far and those descriptors, and carries on.

It trusts only root (or its own user): the socket is in noded's root-only state
directory and every connection's peer is checked with SO_PEERCRED. It decides nothing
about the job (noded's machines do); it only starts, reaps and keeps.

Messages (supproto.py): ``spawn`` {key, argv, env, uid, gid, groups, keep: [names]}
with descriptors [stdin, stdout, stderr, *kept] -> {pid, created}; ``attach`` ->
{children: [{key, pid, created, status, rusage, keep}]} with every kept descriptor, in
order; ``drop`` {key, names} closes kept copies (a task's stdin at its EOF);
``forget`` {key}: noded has its exit; ``kill`` {signal}: to every live child's process
group; ``close``: exit once no child runs. Events: ``exit`` {key, pid, status, rusage}
to the attached noded. Standard library only: it must start fast and stay small.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from noded import supproto


@dataclass
class Child:
    key: str
    pid: int
    popen: subprocess.Popen[bytes]
    created: float
    keep: dict[str, int] = field(default_factory=dict)
    status: int | None = None  # the raw wait status once reaped
    rusage: dict[str, float] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "pid": self.pid,
            "created": self.created,
            "status": self.status,
            "rusage": self.rusage,
            "keep": list(self.keep),
        }


def _say(event: str, **fields: object) -> None:
    """A log line in noded's format; stderr may be gone with noded: never fatal."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    extra = "".join(f" {k}={v}" for k, v in fields.items())
    with contextlib.suppress(OSError, ValueError):
        print(
            f'timestamp={stamp} level=info event="{event}" component=noded-supervisor' + extra,
            file=sys.stderr,
            flush=True,
        )


class Supervisor:
    def __init__(self, listener: socket.socket, first: socket.socket | None) -> None:
        self.listener = listener
        self.children: dict[str, Child] = {}
        self.by_pid: dict[int, Child] = {}
        self.noded: socket.socket | None = None  # the attached noded: it gets the exits
        self.closing = False
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd tells us
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        if first is not None:  # the noded that started it: attached from the start
            self._adopt(first)
            self.noded = first

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        while not self._done():
            for key, _ in self.selector.select(timeout=5.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 512):
                            pass
                else:
                    self._serve(key.fileobj)  # type: ignore[arg-type]
            self._reap()

    def _done(self) -> bool:
        live = any(c.status is None for c in self.children.values())
        if live:
            return False
        if self.closing:
            return True
        # nothing runs, nothing is left to hand over, and nobody may ask: an orphan
        return not self.children and self.noded is None and not self._connections()

    def _connections(self) -> list[socket.socket]:
        return [
            k.fileobj  # type: ignore[misc]
            for k in self.selector.get_map().values()
            if k.data == "conn"
        ]

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self._adopt(conn)

    def _adopt(self, conn: socket.socket) -> None:
        if not supproto.peer_is_ours(conn):
            conn.close()  # nobody but root speaks to a supervisor
            return
        conn.setblocking(True)
        self.selector.register(conn, selectors.EVENT_READ, "conn")

    def _drop_conn(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        if conn is self.noded:
            self.noded = None
        conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            got = supproto.receive(conn)
        except (OSError, supproto.ProtocolError) as exc:
            _say("connection dropped", error=str(exc))
            self._drop_conn(conn)
            return
        if got is None:
            self._drop_conn(conn)
            return
        message, fds = got
        try:
            reply, out = self._handle(conn, message, fds)
        except Exception as exc:  # one bad request never takes the job's parent down
            supproto.close_all(fds)
            reply, out = {"error": f"{type(exc).__name__}: {exc}"}, []
        reply["id"] = message.get("id")
        try:
            supproto.send(conn, reply, out)
        except OSError:
            self._drop_conn(conn)

    # ------------------------------------------------------------ requests

    def _handle(
        self, conn: socket.socket, message: dict[str, Any], fds: list[int]
    ) -> tuple[dict[str, Any], list[int]]:
        op = message.get("op")
        if op == "spawn":
            return self._spawn(message, fds), []
        supproto.close_all(fds)  # only a spawn carries descriptors in
        if op == "attach":
            if self.noded is not None and self.noded is not conn:
                self._drop_conn(self.noded)  # an earlier noded's: it is gone or replaced
            self.noded = conn
            children = list(self.children.values())
            kept = [fd for c in children for fd in c.keep.values()]
            return {"children": [c.describe() for c in children], "pid": os.getpid()}, kept
        if op == "drop":
            child = self.children[str(message["key"])]
            for name in message.get("names", []):
                fd = child.keep.pop(str(name), None)
                if fd is not None:
                    os.close(fd)
            return {"ok": True}, []
        if op == "forget":
            done = self.children.get(str(message["key"]))
            if done is not None and done.status is not None:
                self._forget(done)
            return {"ok": True}, []
        if op == "kill":
            sig = int(message.get("signal", signal.SIGKILL))
            for child in self.children.values():
                if child.status is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(child.pid, sig)
            return {"ok": True}, []
        if op == "close":
            self.closing = True
            return {"ok": True}, []
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}, []
        raise ValueError(f"unknown request {op!r}")

    def _spawn(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        names = [str(n) for n in message.get("keep", [])]
        key = str(message["key"])
        try:
            if len(fds) != 3 + len(names):
                raise ValueError(f"{len(fds)} descriptors for 3 + {len(names)}")
            if key in self.children:
                raise ValueError(f"{key} is already here")
            if self.closing:
                raise ValueError("the supervisor is closing")
            argv = [str(a) for a in message["argv"]]
            env = {str(k): str(v) for k, v in dict(message["env"]).items()}
            uid, gid = int(message["uid"]), int(message["gid"])
            groups = [int(g) for g in message.get("groups", [])]
            other = uid != os.geteuid()
            popen = subprocess.Popen(
                argv,
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                cwd="/",
                env=env,
                start_new_session=True,
                user=uid if other else None,
                group=gid if other else None,
                extra_groups=groups if other else None,
            )
        except BaseException:
            supproto.close_all(fds)
            raise
        supproto.close_all(fds[:3])  # the child has them now
        created = _start_time(popen.pid)
        child = Child(key, popen.pid, popen, created, dict(zip(names, fds[3:], strict=True)))
        self.children[key] = child
        self.by_pid[child.pid] = child
        return {"pid": child.pid, "created": created}

    def _forget(self, child: Child) -> None:
        supproto.close_all(list(child.keep.values()))
        child.keep.clear()
        self.children.pop(child.key, None)
        self.by_pid.pop(child.pid, None)

    # ------------------------------------------------------------ children

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.by_pid.get(pid)
            if child is None:
                continue
            child.popen.returncode = os.waitstatus_to_exitcode(status)  # not waited again
            child.status = status
            child.rusage = {
                "utime": usage.ru_utime,
                "stime": usage.ru_stime,
                "maxrss_kb": float(usage.ru_maxrss),
            }
            if self.noded is not None:
                event = {"event": "exit", **child.describe()}
                try:
                    supproto.send(self.noded, event)
                except OSError:
                    self._drop_conn(self.noded)  # it gets the status when it attaches


def _start_time(pid: int) -> float:
    """As records.start_time (psutil's create_time), 0.0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        with open("/proc/stat") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime"))
        return float(fields[19]) / os.sysconf("SC_CLK_TCK") + boot
    except (OSError, ValueError, IndexError, StopIteration):
        return 0.0


def _ignore(signum: int, frame: object) -> None:
    """A signal the supervisor takes and drops (reset to its default in a child's exec)."""


def listen(path: str) -> socket.socket:
    """The supervisor's socket at ``path`` (its directory is root's alone)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = os.umask(0o177)
    try:
        with supproto.ShortPath(path) as short:
            sock.bind(short)
    finally:
        os.umask(old)
    sock.listen(8)
    return sock


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m noded.supervise SOCKET FD (FD: noded's end)", file=sys.stderr)
        return 2
    os.umask(0o077)
    # a Ctrl-C or hang-up meant for noded is not ours: caught and dropped, not ignored
    # (an ignored signal stays ignored across exec: a task's Ctrl-C would never reach it)
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGHUP, _ignore)
    with contextlib.suppress(OSError):
        os.chdir("/")
    fd = int(argv[1])
    os.closerange(3, fd)  # nothing else of noded's is ours to hold
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
    first = None
    with contextlib.suppress(OSError):
        first = socket.socket(fileno=fd)  # the pair noded started us with
    listener = listen(argv[0])
    try:
        Supervisor(listener, first).run()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
