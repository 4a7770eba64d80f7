"""A job's supervisor (noded/supervise.py) as a real process: it starts, reaps and keeps,
and a noded that let go of it attaches again and finds everything (issue 35)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket

import pytest

from corral.errors import LaunchError
from noded import supproto
from noded.supervisor import Supervisor

pytestmark = pytest.mark.timeout(60)


def _spool(tmp_path: pathlib.Path) -> str:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    return str(spool)


async def _spawn(sup: Supervisor, key: str, script: str, **keep: int) -> tuple[int, int]:
    """``script`` as a child of ``sup``: (its stdout's read end, its stdin's write end)."""
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    proc = await sup.spawn(
        key,
        ["/bin/sh", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        uid=os.getuid(),
        gid=os.getgid(),
        groups=[],
        stdio=(in_r, out_w, out_w),
        keep={"out": out_r, "gate": in_w, **keep},
    )
    os.close(in_r)
    os.close(out_w)
    assert proc.pid > 0
    return out_r, in_w


async def test_a_supervisor_keeps_its_childs_exit_and_pipes_for_the_next_noded(
    tmp_path: pathlib.Path,
) -> None:
    sup = await Supervisor.start(_spool(tmp_path), 7)
    out_r, in_w = await _spawn(sup, "task.0.0.0", "read line; echo got $line; exit 3")
    sup.detach()  # noded dies: its descriptors with it
    os.close(out_r)
    os.close(in_w)
    got = await Supervisor.attach(sup.path, sup.pid)
    assert got is not None
    again, found = got
    (task,) = found
    assert task.process.key == "task.0.0.0" and task.process.returncode is None
    # the task never saw its reader or its stdin go: the supervisor kept them
    os.write(task.fds["gate"], b"hello\n")
    assert os.read(task.fds["out"], 100) == b"got hello\n"
    assert await asyncio.wait_for(task.process.wait(), 10) == 3
    assert "utime" in task.process.rusage
    await again.forget("task.0.0.0")
    await again.close()
    assert await sup.exited(10)  # it exits once nothing runs and noded let go
    assert not os.path.exists(again.path)


async def test_an_exit_while_no_noded_was_there_is_handed_to_the_next(
    tmp_path: pathlib.Path,
) -> None:
    sup = await Supervisor.start(_spool(tmp_path), 8)
    out_r, in_w = await _spawn(sup, "batch.0", "exit 5")
    sup.detach()
    os.close(in_w)
    await asyncio.wait_for(_reaped(sup, 8), 10)
    got = await Supervisor.attach(sup.path, sup.pid)
    assert got is not None
    again, (batch,) = got
    assert batch.process.returncode == 5 and batch.process.status is not None
    os.close(out_r)
    for fd in batch.fds.values():
        os.close(fd)
    await again.close()
    assert await sup.exited(10)


async def test_drop_ends_a_tasks_stdin_and_kill_reaches_its_process_group(
    tmp_path: pathlib.Path,
) -> None:
    sup = await Supervisor.start(_spool(tmp_path), 9)
    out_r, in_w = await _spawn(sup, "t", "cat; echo eof; sleep 60")
    os.close(in_w)  # noded's copy: the supervisor's keeps the pipe open
    await sup.drop("t", "gate")  # ... until it goes too
    assert os.read(out_r, 100) == b"eof\n"
    await sup.kill(signal.SIGKILL)
    assert await asyncio.wait_for(sup.processes["t"].wait(), 10) == -signal.SIGKILL
    os.close(out_r)
    await sup.close()
    assert await sup.exited(10)


async def test_attach_refuses_a_socket_answered_by_another_process(tmp_path: pathlib.Path) -> None:
    sup = await Supervisor.start(_spool(tmp_path), 10)
    assert await Supervisor.attach(sup.path, sup.pid + 1) is None  # not the recorded pid
    assert await Supervisor.attach(sup.path + ".nope", sup.pid) is None
    await sup.close()
    assert await sup.exited(10)


async def test_a_spawn_the_supervisor_cannot_do_says_why(tmp_path: pathlib.Path) -> None:
    sup = await Supervisor.start(_spool(tmp_path), 11)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        with pytest.raises(LaunchError, match="No such file"):
            await sup.spawn(
                "x",
                ["/nonexistent/program"],
                env={},
                uid=os.getuid(),
                gid=os.getgid(),
                groups=[],
                stdio=(null, null, null),
            )
    finally:
        os.close(null)
    await sup.close()
    assert await sup.exited(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes another user")
async def test_nobody_but_root_speaks_to_a_supervisor(tmp_path: pathlib.Path) -> None:
    """Its socket is in a root-only directory; even given the path (its directory opened
    up, as a mistake would), another user's connection is dropped unanswered."""
    sup = await Supervisor.start(_spool(tmp_path), 12)
    directory = os.path.dirname(sup.path)
    assert os.stat(directory).st_mode & 0o077 == 0
    os.chmod(directory, 0o711)
    os.chmod(os.path.dirname(directory), 0o711)
    os.chmod(os.path.dirname(os.path.dirname(directory)), 0o711)
    os.chmod(sup.path, 0o777)
    try:
        answered = await asyncio.to_thread(_as_nobody, sup.path)
    finally:
        os.chmod(directory, 0o700)
    assert answered == b"", "another user got an answer from a supervisor"
    assert sup.alive()  # and the supervisor is none the worse
    await sup.close()
    assert await sup.exited(10)


def _as_nobody(path: str) -> bytes:
    """Connect as uid 65534 and ask to attach: what came back ("" if dropped)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(5)
            s.connect(path)
            supproto.send(s, {"op": "attach", "id": 1})
            data = s.recv(65536)
            os.write(w, data or b"")
        except OSError:
            pass
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return data


async def _reaped(sup: Supervisor, _job: int) -> None:
    """Until the supervisor has reaped its child (a ping is answered after its reap)."""
    for _ in range(500):
        got = await Supervisor.attach(sup.path, sup.pid)
        assert got is not None
        again, found = got
        done = all(f.process.returncode is not None for f in found)
        for f in found:
            for fd in f.fds.values():
                os.close(fd)
        again.detach()
        if done:
            return
        await asyncio.sleep(0.02)


async def test_a_child_gets_every_signal_as_the_default_takes_it(tmp_path: pathlib.Path) -> None:
    """The supervisor drops SIGINT and SIGHUP meant for noded's group; its children must
    not inherit them ignored (an srun --pty task's Ctrl-C would never arrive)."""
    sup = await Supervisor.start(_spool(tmp_path), 13)
    out_r, in_w = await _spawn(sup, "t", "grep SigIgn /proc/self/status")
    os.close(in_w)
    ignored = int(os.read(out_r, 200).split()[-1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGHUP - 1)), hex(ignored)
    os.close(out_r)
    assert await asyncio.wait_for(sup.processes["t"].wait(), 10) == 0
    await sup.close()
    assert await sup.exited(10)
