"""The cached image, bound read-only where only the job's user reaches it.

The cache is root's alone (cache.py). A container's lower layer is a bind mount of the
image's rootfs at ``c_<name>/lower/image``, made by root while every directory on that
path is still root's; then ``lower/`` is handed to the user (0500): her fuse-overlayfs
reads the image through it, and the path it shows in ``ps`` is one no other user can
open. The bind is read-only, nosuid and nodev whatever the image holds, and a mount
point cannot be renamed or replaced while it is mounted.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from noded.containers import unmount
from noded.containers.errors import container_error

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    rc: int = _libc.mount(
        None if source is None else os.fsencode(source), os.fsencode(target), None, flags, None
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise container_error(f"cannot bind the image for the container: {os.strerror(err)}")


def bind_readonly(source: str, target: str) -> None:
    """Bind the directory ``source`` at ``target`` read-only, nosuid, nodev."""
    _mount(source, target, MS_BIND)
    try:  # a bind takes its flags from a remount of it
        _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except BaseException:
        unmount.detach(target)
        raise
