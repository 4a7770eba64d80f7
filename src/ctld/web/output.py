"""The tail of a job's output file, for its owner's job page.

ctld may run as root and the path is the user's to choose (and to swap for a FIFO, a
device or a link later), so a file is shown only if it is a regular file that the
job's user owns, with one name, reached without a link at the end: it is checked
before it is opened (corral/userfile.py: a FIFO or a device is never opened, a link
to root's file never followed), so what the page shows the user could read anyway. A
file on a node's local disk, not shared with ctld's host, is simply not there.
"""

from __future__ import annotations

import os

from corral.userfile import NotUsersFile, open_users_file

TAIL_BYTES = 64 * 1024


def tail(path: str, uid: int, limit: int = TAIL_BYTES) -> tuple[str, str]:
    """(text, "") or ("", why it is not shown)."""
    if not path or not os.path.isabs(path):
        return "", "no output file"
    try:
        fd = open_users_file(path, uid, one_name=True)
    except NotUsersFile as exc:
        return "", f"not shown: {exc}"
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        data = os.pread(fd, limit, start)
    except OSError as exc:
        return "", f"not shown: not read ({exc.strerror})"
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    if start:
        text = f"[... the first {start} bytes are left out ...]\n" + text.partition("\n")[2]
    return text, ""
