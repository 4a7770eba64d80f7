"""The messages between noded and a job's supervisor (supervise.py), both ends.

One message is one datagram of a ``SOCK_SEQPACKET`` Unix socket: a JSON object, with
any file descriptors it carries in the same datagram (SCM_RIGHTS), so a message and
its descriptors can never be split or interleaved with another's. The socket lives in
noded's root-only state directory and each end checks the other is root
(``peer_is_ours``): what a job's user can write never reaches either side.

Standard library only: the supervisor imports it and must start fast.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct
from typing import Any

MAX_MESSAGE = 4 * 1024 * 1024  # an environment of a few hundred KiB fits many times
MAX_FDS = 64
SOCKET_DIR = "sup"  # under <spool>/state: the supervisors' sockets


class ProtocolError(Exception):
    """The other end sent something that is not a message of this protocol."""


def socket_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE)
    return a, b


class ShortPath:
    """A Unix socket's path as ``/proc/self/fd/N/NAME`` (its directory held open): the
    kernel takes at most 107 bytes, and a spool can be deeper than that."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> str:
        if len(self.path.encode()) < 100:
            return self.path
        directory, name = os.path.split(self.path)
        self.fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.fd}/{name}"

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE)
        with ShortPath(path) as short:
            s.connect(short)
    except OSError:
        s.close()
        raise
    return s


def peer(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the other end, from the kernel (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def peer_is_ours(sock: socket.socket) -> bool:
    """The other end runs as root, or as this process's own user (a noded run by a
    user for her own local cluster)."""
    return peer(sock)[1] in (0, os.geteuid())


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message (blocking until the kernel takes it; messages are small)."""
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"a message of {len(data)} bytes (the limit is {MAX_MESSAGE})")
    ancillary = []
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    sock.sendmsg([data], ancillary)


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and its descriptors (the caller owns them); None at the end.
    Raises BlockingIOError on a non-blocking socket with nothing to read."""
    fds = array.array("i")
    data, ancillary, flags, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    got = list(fds)
    if not data and not got:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        close_all(got)
        raise ProtocolError("a message cut short (too long, or too many descriptors)")
    try:
        message = json.loads(data)
    except ValueError:
        close_all(got)
        raise ProtocolError("a message that is not JSON") from None
    if not isinstance(message, dict):
        close_all(got)
        raise ProtocolError("a message that is not an object")
    return message, got


def close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
