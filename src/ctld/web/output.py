"""The tail of a job's output file, for its owner's job page.

ctld may run as root and the path is the user's to choose (and to swap for a link
later), so a file is shown only if it is a regular file that the job's user owns,
opened without following a link at the end (a symlink or a hard link to someone
else's file shows nothing): what it shows, the user could read anyway. A file on a
node's local disk, not shared with ctld's host, is simply not there.
"""

from __future__ import annotations

import os
import stat

TAIL_BYTES = 64 * 1024


def tail(path: str, uid: int, limit: int = TAIL_BYTES) -> tuple[str, str]:
    """(text, "") or ("", why it is not shown)."""
    if not path or not os.path.isabs(path):
        return "", "no output file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        return "", f"not readable from ctld's host ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
            return "", "not shown: not a regular file of the job's user"
        start = max(0, st.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, limit)
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    if start:
        text = f"[... the first {start} bytes are left out ...]\n" + text.partition("\n")[2]
    return text, ""
