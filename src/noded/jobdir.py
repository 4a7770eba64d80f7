"""Files noded (root) makes for a job's user, and the one it appends to.

A job's directory in the spool (``job<id>/``: its script and progress file) is root's,
mode 0711: the user reaches her files by name but can neither list it nor put
anything in it, so nothing there is a link she made. Each file is created afresh
(O_EXCL, O_NOFOLLOW) and handed over by its open descriptor (fchown), never by a path
looked up again. A directory left by an older noded (the user's own then) is moved
aside and removed without following anything in it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat

import structlog

from corral.userfile import NotUsersFile, open_users_file

log = structlog.get_logger("noded")

JOB_DIR_MODE = 0o711  # the user reaches her script by name; nobody lists or adds


def _as_root() -> bool:
    return os.geteuid() == 0


def make_dir(path: str) -> str:
    """A fresh directory of noded's own at ``path`` (its parent is noded's alone): what
    was there before (a crashed run's, or an older noded's user-owned one) goes first."""
    discard(path)
    os.mkdir(path, JOB_DIR_MODE)
    os.chmod(path, JOB_DIR_MODE)  # whatever noded's umask
    return path


def discard(path: str) -> None:
    """Remove ``path`` and all in it, following no link: renamed aside first (in noded's
    own parent), so nothing can be added under the name meanwhile."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    head, tail = os.path.split(path)
    aside = os.path.join(head, f".{tail}.gone-{secrets.token_hex(4)}")
    os.rename(path, aside)
    # fd-based on Linux (shutil.rmtree.avoids_symlink_attacks): links are unlinked only
    shutil.rmtree(aside, ignore_errors=True)


def create_for_user(
    path: str, uid: int, gid: int, *, data: bytes = b"", mode: int = 0o600, epoch: bool = False
) -> None:
    """Create ``path`` (it must not exist), write ``data``, and give it to uid:gid by its
    descriptor. ``epoch`` dates it 1970 (an untouched progress file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if epoch:
            os.utime(fd, (0, 0))
        os.fchmod(fd, mode)  # not narrowed by noded's umask
        if _as_root():
            os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def make_user_dir(
    path: str, uid: int, gid: int, *, first_file: tuple[str, bytes] | None = None
) -> bool:
    """``path``'s last part made a directory of uid:gid, unless something is there
    already (then left as it is: never handed over; False). Its parent is the
    operator's (noded.checkpoint_dir), made root's if missing. ``first_file`` (a name and
    its bytes) is written in it, the user's too, before the directory is handed over."""
    parent, name = os.path.split(os.path.normpath(path))
    os.makedirs(parent, mode=0o755, exist_ok=True)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            return False
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=pfd)
        try:
            st = os.fstat(fd)
            ours = st.st_uid == os.geteuid()  # the one made above, not a swap
            if first_file is not None and ours:
                _create_at(fd, first_file[0], first_file[1], uid, gid)
            if ours and _as_root():
                os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)
    return True


def _create_at(dir_fd: int, name: str, data: bytes, uid: int, gid: int) -> None:
    """A new read-only file ``name`` in the directory ``dir_fd``, given to uid:gid."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o444)
        if _as_root():
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def discard_users_dir(root: str, name: str, uid: int) -> bool:
    """Remove ``root/name`` (a job's checkpoint directory) if it is a directory of
    ``uid``'s, reached without a link: renamed aside inside ``root`` (the operator's,
    not the user's) and removed without following anything in it."""
    if not name or "/" in name or name in (".", ".."):
        return False
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return False
    discard(path)
    return True


def append_to_users_file(path: str, uid: int, text: str) -> bool:
    """Append ``text`` to ``path`` only if it is a regular file of ``uid``'s, reached
    without a final link, and never create one: checked before it is opened
    (corral/userfile.py: no device or FIFO is ever opened by root)."""
    try:
        fd = open_users_file(path, uid, append=True)
    except NotUsersFile:
        return False
    try:
        os.write(fd, text.encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
