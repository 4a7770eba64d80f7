"""Who a uid is, from the user database: never from what a request says."""

from __future__ import annotations

import os
import pwd

from corral.errors import PermissionDenied
from corral.identity import Identity


def identity_of(uid: int, gid: int | None = None) -> Identity:
    """The Identity of ``uid`` with primary group ``gid`` (default: the user's own).

    ``gid`` must be one of the user's groups in the user database; a group the user
    merely claims is refused.
    """
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise PermissionDenied(f"Access/permission denied: uid {uid} is not a known user") from None
    if gid is None or gid == pw.pw_gid:
        return Identity(user=pw.pw_name, uid=uid, gid=pw.pw_gid)
    if gid not in groups_of(pw.pw_name, pw.pw_gid):
        raise PermissionDenied(
            f"Access/permission denied: {pw.pw_name} is not a member of group {gid}"
        )
    return Identity(user=pw.pw_name, uid=uid, gid=gid)


def identity_of_name(user: str) -> Identity:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise PermissionDenied(f"Access/permission denied: {user!r} is not a known user") from None
    return Identity(user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid)


def groups_of(user: str, gid: int) -> list[int]:
    """The user's groups in the database (primary and supplementary)."""
    try:
        return os.getgrouplist(user, gid)
    except OSError:
        return [gid]


def uids_of(names: tuple[str, ...] | frozenset[str]) -> frozenset[int]:
    """uids of configured user names (names unknown here are skipped)."""
    out = set()
    for name in names:
        try:
            out.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    return frozenset(out)
