"""Which files something opened or read, told by the kernel (inotify's IN_OPEN and
IN_ACCESS on each watched inode): the tests that root never opens a FIFO, a device
or a file of root's that a user named ask it.

An ``O_PATH`` descriptor opens nothing, but kernels before 6.x reported one as an
IN_OPEN too: ``o_path_silent`` says whether this kernel tells them apart, and where
it does not, only reads (IN_ACCESS) count.
"""

from __future__ import annotations

import ctypes
import os
import struct
import tempfile

IN_ACCESS = 0x001
IN_OPEN = 0x020
_EVENT = struct.Struct("iIII")

_libc = ctypes.CDLL(None, use_errno=True)


class OpenWatch:
    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths: dict[int, str] = {}
        self.mask = IN_ACCESS | (IN_OPEN if o_path_silent() else 0)

    def add(self, path: str) -> None:
        """Watch the inode ``path`` names (a link's own inode: IN_DONT_FOLLOW)."""
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), self.mask | 0x02000000)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self.paths[wd] = path

    def touched(self) -> list[str]:
        """The watched paths opened or read since the last call."""
        found: list[str] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return found
            at = 0
            while at < len(buf):
                wd, mask, _cookie, size = _EVENT.unpack_from(buf, at)
                at += _EVENT.size + size
                if mask & self.mask and wd in self.paths:
                    found.append(self.paths[wd])

    def close(self) -> None:
        os.close(self.fd)


def o_path_silent() -> bool:
    """Whether an O_PATH descriptor of a file raises no IN_OPEN on this kernel."""
    fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    with tempfile.NamedTemporaryFile() as probe:
        _libc.inotify_add_watch(fd, os.fsencode(probe.name), IN_OPEN)
        os.close(os.open(probe.name, os.O_PATH))
        try:
            return not os.read(fd, 4096)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
