"""Who is calling: the identity every RPC carries.

Today the caller states its user name and uid in request metadata (gRPC metadata or
HTTP headers, the same keys). ctld turns metadata into an Identity through one
Authenticator (ctld/auth.py), so munge, JWT or mTLS replace that one object later
without touching any call site.
"""

from __future__ import annotations

import os
import pwd

USER_KEY = "x-corral-user"
UID_KEY = "x-corral-uid"
GID_KEY = "x-corral-gid"


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


def identity_metadata(identity: Identity) -> list[tuple[str, str]]:
    return [(USER_KEY, identity.user), (UID_KEY, str(identity.uid)), (GID_KEY, str(identity.gid))]
