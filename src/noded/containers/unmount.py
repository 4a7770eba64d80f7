"""Unmounting a container's filesystems as root, without being led elsewhere.

A container has two mounts: ``<data_dir>/job_<id>/c_<name>/rootfs`` (the user's
fuse-overlayfs) and ``c_<name>/lower/image`` (root's read-only bind of the cached
image, bindmount.py). Every directory above each is root's but ``lower/``, the
user's, whose ``image`` she cannot rename or replace while it is mounted; the mount
point itself is never followed (UMOUNT_NOFOLLOW). Mounts a user made in their own
directories (their upper layer, their /tmp) are not ours to remove and are never
touched: root never unmounts a path a user could have redirected.
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
_OURS = re.compile(r"^job_[0-9]+/c_[A-Za-z0-9_.-]+/(rootfs|lower/image)$")
# a container's mounts, the overlay first (it reads the image through the other)
MOUNTS = ("rootfs", "lower/image")


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
    gone = sorted(container_mounts(state_dir, job_dir), key=lambda t: t.endswith("/image"))
    for target in gone:
        detach(target)
    return gone


def detach_container(directory: str) -> None:
    """Detach both mounts of the container at ``directory`` (those that are there)."""
    for sub in MOUNTS:
        detach(os.path.join(directory, sub))


def still_mounted(directory: str) -> list[str]:
    """Our mount points under ``directory`` the kernel still has: while the image's
    bind is there, removing the directory would remove the cached image's files."""
    base = os.path.realpath(directory)
    ours = {os.path.join(base, sub) for sub in MOUNTS}
    return [t for t in _mount_points() if t in ours]
