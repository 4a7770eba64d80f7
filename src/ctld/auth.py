"""Who is calling, and what they may do: the one place ctld decides either.

``Authenticator.identify`` turns request metadata into an Identity. Today's
``ClaimedIdentity`` trusts what the caller states (fine on a single-user local
cluster and behind a trusted network); munge, JWT or mTLS authenticators replace it
without touching the RPC handlers, which only ever see an Identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from corral.errors import PermissionDenied
from corral.identity import GID_KEY, UID_KEY, USER_KEY, Identity
from corral.wire import corral_pb2 as pb


class Authenticator(Protocol):
    def identify(self, metadata: Mapping[str, str]) -> Identity: ...


class ClaimedIdentity:
    """Believes the user name and uid the caller sends (no real authentication yet)."""

    def identify(self, metadata: Mapping[str, str]) -> Identity:
        user = metadata.get(USER_KEY, "")
        uid_s = metadata.get(UID_KEY, "")
        gid_s = metadata.get(GID_KEY, uid_s)
        if not user or not uid_s.isdigit() or not (gid_s or "0").isdigit():
            raise PermissionDenied("Access/permission denied: the request carries no identity")
        if len(user) > 64 or not user.isprintable() or ":" in user:
            raise PermissionDenied("Access/permission denied: malformed user name")
        return Identity(user=user, uid=int(uid_s), gid=int(gid_s or 0))


class Policy:
    """Authorization rules: owners act on their own jobs, operators on all."""

    def __init__(self, operators: Iterable[str]) -> None:
        self.operators = frozenset(operators)

    def is_operator(self, who: Identity) -> bool:
        return who.uid == 0 or who.user in self.operators

    def check_job(self, who: Identity, job: pb.Job, action: str) -> None:
        if who.uid == job.uid or self.is_operator(who):
            return
        raise PermissionDenied(
            f"Access/permission denied: {who.user} may not {action} job {job.job_id} of {job.user}"
        )

    def check_operator(self, who: Identity, action: str) -> None:
        if not self.is_operator(who):
            raise PermissionDenied(f"Access/permission denied: {action} needs an operator")
