"""Reading a file of an unpacked image as root without leaving the image.

An image's own links are the user's to choose: ``/etc`` may point at ``/root/secret``.
Root resolves a path of the image as the container would, with the image's root as
``/`` (openat2's RESOLVE_IN_ROOT), never through /proc's magic links nor onto another
file system, and reads only a regular file. Without openat2 (Linux before 5.6) every
component is opened with O_NOFOLLOW: a path through any link is not read at all.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat

_SYS_OPENAT2 = 437  # the same number on every architecture since Linux 5.6
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
# resolved as O_PATH: no open of a device or FIFO has happened when its type is seen
_FLAGS = os.O_PATH | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _openat2(dir_fd: int, path: str) -> int:
    how = _OpenHow(_FLAGS, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV)
    fd: int = _libc.syscall(
        _SYS_OPENAT2,
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _open_no_links(dir_fd: int, path: str) -> int:
    parts = [p for p in path.split("/") if p and p != "."]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a plain path", path)
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], _FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def open_beneath(root_fd: int, path: str) -> int:
    """An O_PATH descriptor of ``path`` resolved inside the directory ``root_fd``."""
    try:
        return _openat2(root_fd, path.lstrip("/"))
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter's
            raise
    return _open_no_links(root_fd, path)


def read_file(root: str, path: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of regular file ``path`` of the tree at ``root`` (the
    image's ``/``); None when it is missing, not a regular file, or only reachable by
    leaving the tree."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            found = open_beneath(root_fd, path)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(found).st_mode):
                return None
            fd = os.open(f"/proc/self/fd/{found}", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.close(found)
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)
    finally:
        os.close(root_fd)
