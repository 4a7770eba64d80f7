"""Making an unpacked image safe to keep and share, before anything of it is read.

An image is whatever its user made: a squashfs built with pseudo-file definitions, or
a tar layer written by hand, records any device node, setuid file or extended
attribute without any privilege. The unpacking tools run as root and recreate them, so
every entry of the staged tree (root's alone, reached by nobody else) is then walked by
directory descriptors, never following a link:

- character and block devices and sockets are removed: a device node is the host's
  device to whoever opens it (``/dev/hwrng``, a whole disk); a socket means nothing in
  an image. FIFOs stay: a container's FIFO is a pipe of its own mount, never the
  cache's file.
- every entry becomes root's, with no setuid/setgid bit, no group/other write bit,
  and no extended attribute (file capabilities, ACLs, overlay markers).
"""

from __future__ import annotations

import errno
import os
import stat

from noded.containers.errors import container_error

DROPPED = (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK)
OWNER = (os.geteuid(), os.getegid())  # root (a noded run by a user: that user)


def _fix_dir(dir_fd: int, st: os.stat_result) -> None:
    """The directory open as ``dir_fd``: root's, searchable by root, no privilege bits."""
    os.chown(dir_fd, *OWNER)
    for attr in os.listxattr(dir_fd):
        os.removexattr(dir_fd, attr)
    os.chmod(dir_fd, (stat.S_IMODE(st.st_mode) & ~0o6022) | 0o700)


def _fix_entry(dir_fd: int, name: str, st: os.stat_result) -> None:
    """``name`` in the directory ``dir_fd``, never followed if a link."""
    os.chown(name, *OWNER, dir_fd=dir_fd, follow_symlinks=False)
    # the *xattr calls take no dir_fd: the directory's descriptor, by /proc, stands in
    path = f"/proc/self/fd/{dir_fd}/{name}"
    for attr in os.listxattr(path, follow_symlinks=False):
        os.removexattr(path, attr, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):  # a link has no mode of its own
        os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o6022, dir_fd=dir_fd, follow_symlinks=False)


def sanitize(rootfs: str, source: str) -> int:
    """Fix the tree at ``rootfs`` in place as above; returns the bytes it takes."""
    total = 0
    try:
        for _, dirnames, filenames, dir_fd in os.fwalk(rootfs, follow_symlinks=False):
            st = os.fstat(dir_fd)
            total += st.st_blocks * 512
            _fix_dir(dir_fd, st)
            for name in [*dirnames, *filenames]:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_IFMT(st.st_mode) in DROPPED:
                    os.unlink(name, dir_fd=dir_fd)
                    continue
                if not stat.S_ISDIR(st.st_mode):  # a directory is counted and fixed when walked
                    total += st.st_blocks * 512
                    _fix_entry(dir_fd, name, st)
    except (OSError, ValueError, NotImplementedError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise container_error(f"image {source}: cannot make it safe to keep ({exc})") from None
    return total
