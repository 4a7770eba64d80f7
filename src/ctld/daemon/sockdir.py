"""ctld's Unix socket: the directory it lives in must be ctld's own (docs/security.md,
"ctld's socket").

Whoever can write the socket's directory can remove ctld's socket and put a listener
of her own in its place, and every command on the host then hands her its script,
environment and ``--export`` secrets. So ctld binds only in a directory that is ctld's
user's (or root's) and writable by no one else, reached through directories that no
one else could rename or replace (root's or ctld's user's, writable by no one else
unless sticky, as /tmp). A missing directory is made (0755). Anything else and ctld
refuses to start, saying which directory, whose it is and what to do.

An abstract socket (``@name``) has no directory: its name goes to whoever binds it
first, and only the commands' own check of who serves it (corral.rest) protects them.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat

from corral.auth.peercred import socket_address
from corral.errors import ConfigError


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def unsafe(directory: str, uid: int) -> str:
    """Why ``directory`` (and the way to it) is not safe for a socket of ``uid``; "" if it is."""
    trusted = {0, uid}
    try:
        link = os.lstat(directory)
    except OSError as exc:
        return f"cannot inspect {directory}: {exc.strerror or exc}"
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in trusted:
        return f"{directory} is a symbolic link that belongs to {_who(link.st_uid)}"
    real = os.path.realpath(directory)
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a directory"
    if st.st_uid not in trusted:
        return f"the directory {real} belongs to {_who(st.st_uid)}, not to ctld's user {_who(uid)}"
    if _writable_by_others(st):
        return f"the directory {real} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    parent = os.path.dirname(real)
    while True:
        st = os.stat(parent)
        if st.st_uid not in trusted:
            return f"{parent}, on the way to {real}, belongs to {_who(st.st_uid)}"
        if _writable_by_others(st) and not st.st_mode & stat.S_ISVTX:
            return f"{parent}, on the way to {real}, is writable by others and not sticky"
        if parent == "/":
            return ""
        parent = os.path.dirname(parent)


def prepare(path: str, uid: int | None = None) -> str:
    """The address to bind for ``path``: its directory made (0755) or checked, a stale
    socket removed. ConfigError when the directory is not ctld's alone."""
    if path.startswith("@"):
        return socket_address(path)
    uid = os.geteuid() if uid is None else uid
    directory = os.path.dirname(path) or "/"
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"controller.socket {path}: cannot make {directory}: {exc}") from None
    why = unsafe(directory, uid)
    if why:
        raise ConfigError(
            f"controller.socket {path}: {why}; whoever can write there could put a "
            "controller of their own in place of ctld's socket. Remove the directory (ctld "
            "makes it), give it to ctld's user with mode 0755, or choose another path"
        )
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise ConfigError(f"controller.socket {path}: a directory is in the way")
        os.unlink(path)
    return path
