"""Opening, as root, a file a user named (a job's ``-o``/``-e`` file): ctld's job page
reads its tail, noded appends its CANCELLED line.

The path is the user's to choose, and to swap for something else at any time: a FIFO
(an open for reading would wait for a writer), a device (an open alone can arm a
watchdog or take a tape offline), a link to a file of root's. So the path is first
resolved without opening anything (``O_PATH | O_NOFOLLOW``: no device's or FIFO's
open is ever called, a link at the end is not followed), what it names is checked
through that descriptor (a regular file, the user's own, with one name when asked),
and only then is that very inode opened, through ``/proc/self/fd`` (the descriptor,
not the path looked up again: nothing can be swapped in between), with
``O_NONBLOCK | O_NOCTTY`` (a lease the user holds on her file makes an open wait
otherwise). What root reads this way the user could read herself.
"""

from __future__ import annotations

import os
import stat

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotUsersFile(Exception):
    """Why the path was not opened (the words a page or a log shows)."""


def open_users_file(path: str, uid: int, *, append: bool = False, one_name: bool = False) -> int:
    """A descriptor of ``path`` opened for reading (``append``: for appending), if it is
    a regular file of ``uid``'s reached without a final link (``one_name``: and with no
    second name, which could be a hard link to a file she may not read); else
    NotUsersFile. Never creates a file."""
    if not os.path.isabs(path):
        raise NotUsersFile("not an absolute path")
    try:
        pinned = os.open(path, _PATH_FLAGS)
    except OSError as exc:
        raise NotUsersFile(f"not there ({exc.strerror})") from None
    try:
        st = os.fstat(pinned)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or (one_name and st.st_nlink != 1):
            raise NotUsersFile("not a regular file of the job's user")
        mode = os.O_WRONLY | os.O_APPEND if append else os.O_RDONLY
        try:
            fd = os.open(f"/proc/self/fd/{pinned}", mode | _OPEN_FLAGS)
        except OSError as exc:
            raise NotUsersFile(f"not opened ({exc.strerror})") from None
    finally:
        os.close(pinned)
    opened = os.fstat(fd)
    # a /proc that is not procfs (a chroot's, a bind mount) could name another file
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise NotUsersFile("not the file that was checked")
    return fd
