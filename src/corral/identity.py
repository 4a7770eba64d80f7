"""Who is calling: the identity ctld works with.

Never sent by a client: ctld derives it from the kernel (its Unix socket), a MUNGE
credential or a JWT (ctld/api/auth.py, docs/security.md). The commands use
``current_identity`` only to fill their own filters (squeue --me, scancel's default).
"""

from __future__ import annotations

import os
import pwd


class Identity:
    """A caller: user name, uid and primary gid. (Not a dataclass: commands import this.)"""

    __slots__ = ("gid", "uid", "user")

    def __init__(self, user: str, uid: int, gid: int) -> None:
        self.user = user
        self.uid = uid
        self.gid = gid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and (self.user, self.uid, self.gid) == (
            other.user,
            other.uid,
            other.gid,
        )

    def __hash__(self) -> int:
        return hash((self.user, self.uid, self.gid))

    def __repr__(self) -> str:
        return f"Identity(user={self.user!r}, uid={self.uid}, gid={self.gid})"


def current_identity() -> Identity:
    """The identity of this process, from the OS (not from environment variables)."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Identity(user=user, uid=uid, gid=os.getgid())
