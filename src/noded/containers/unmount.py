"""Unmounting a container's filesystem as root, without being led elsewhere.

A container's mount is ``<data_dir>/job_<id>/c_<name>/rootfs``: every directory above
it is root's, so no user can swap one for a link, and the mount point itself is never
followed (UMOUNT_NOFOLLOW). Mounts a user made in their own directories (their upper
layer, their /tmp) are not ours to remove and are never touched: root never unmounts a
path a user could have redirected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re

MNT_DETACH = 2  # lazy: a task still dying inside does not hold it
UMOUNT_NOFOLLOW = 8
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_OCTAL = re.compile(r"\\([0-7]{3})")
_OURS = re.compile(r"^job_[0-9]+/c_[A-Za-z0-9_.-]+/rootfs$")


def detach(path: str) -> bool:
    """Lazily unmount the mount at ``path``; False when nothing was mounted there."""
    rc: int = _libc.umount2(os.fsencode(path), MNT_DETACH | UMOUNT_NOFOLLOW)
    return rc == 0


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return [_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), ln.split()[4]) for ln in f]


def container_mounts(state_dir: str, job_dir: str = "") -> list[str]:
    """The container mounts (ours only) under ``state_dir``, or one job's directory."""
    base = os.path.realpath(state_dir)
    found = []
    for target in _mount_points():
        rel = os.path.relpath(target, base) if target.startswith(base + "/") else ""
        if rel and _OURS.match(rel) and (not job_dir or rel.startswith(job_dir + "/")):
            found.append(target)
    return found


def unmount_job(state_dir: str, job_dir: str = "") -> list[str]:
    """Detach every container mount of the job (or of every job); returns them."""
    gone = container_mounts(state_dir, job_dir)
    for target in gone:
        detach(target)
    return gone
