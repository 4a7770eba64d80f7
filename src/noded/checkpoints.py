"""A job's checkpoint directory on its node: made with its marker, refused when it is
another job's, removed once the job has ended for good.

Under the operator's ``noded.checkpoint_dir`` noded makes the directory (the job's
user's) with its marker (corral/checkpoints.py) before handing it over. In the default
root, the job's submit directory, noded (root) makes nothing: the job makes the
directory itself, and its unique name keeps it apart from any other job's. Either way
a directory that is there already is read first: when its marker names another job
(or is not a plain file of the job's user), the launch fails with that said, and the
job never resumes from someone else's checkpoint. What root reads of a user's
directory it reads as corral/userfile.py does: no link followed, no device opened.
"""

from __future__ import annotations

import os
import stat

import structlog

from corral.checkpoints import MARKER, MARKER_MAX, marker_owner, marker_text
from corral.errors import LaunchError
from corral.userfile import NotUsersFile, open_users_file
from noded import jobdir

log = structlog.get_logger("noded")


def prepare(path: str, uid: int, gid: int, *, make: bool) -> None:
    """Before the job starts: ``path`` is this job's checkpoint directory or absent
    (``make``: made now, with its marker); LaunchError (the job fails to start, saying
    why) when it is another job's, another user's, or nobody's we can tell."""
    name = os.path.basename(path)
    if make:
        try:
            made = jobdir.make_user_dir(
                path, uid, gid, first_file=(MARKER, marker_text(name).encode())
            )
        except OSError as exc:  # the job sees it missing: its own to report
            log.warning("checkpoint directory not made", path=path, error=str(exc))
            return
        if made:
            return
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # the job makes it (in its submit directory)
    except OSError as exc:
        if make:
            raise LaunchError(
                f"checkpoint directory not reachable ({exc.strerror}): {path}"
            ) from None
        return  # root may not look (a root-squashed share): the job's own to see
    # one planted by another user (a submit dir others may write in, as /tmp) is not hers
    if not stat.S_ISDIR(st.st_mode) or (os.geteuid() == 0 and st.st_uid != uid):
        raise LaunchError(f"checkpoint directory is not a directory of the job's user: {path}")
    owner = read_marker(path, uid)
    if owner is not None and owner != name:
        raise LaunchError(
            f"checkpoint directory belongs to another job ({MARKER} names "
            f"{owner or 'nothing of ours'}): {path}; move it away to run this job"
        )


def read_marker(path: str, uid: int) -> str | None:
    """The directory name the marker in ``path`` records; None when there is no marker
    (or no directory, or nothing root may look at); LaunchError when the marker is not
    a regular file of uid's."""
    marker = os.path.join(path, MARKER)
    try:
        os.lstat(marker)
    except OSError:  # absent, or a root-squashed share: nothing to go by
        return None
    try:
        fd = open_users_file(marker, uid, one_name=True)
    except NotUsersFile as exc:
        raise LaunchError(f"checkpoint directory's {MARKER} is {exc}: {path}") from None
    try:
        text = os.read(fd, MARKER_MAX).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return marker_owner(text)


def remove(root: str, name: str, uid: int) -> bool:
    """The job ended for good: ``root/name`` goes if it is uid's directory and its
    marker names it (or it has none, as a directory from before markers)."""
    if not name or "/" in name or name in (".", ".."):
        return False
    try:
        owner = read_marker(os.path.join(root, name), uid)
    except LaunchError:
        owner = ""
    if owner is not None and owner != name:
        log.warning("checkpoint directory of another job kept", root=root, name=name, owner=owner)
        return False
    return jobdir.discard_users_dir(root, name, uid)
