"""Who is calling: the one place ctld turns a connection and its metadata into an Identity.

Nothing a request *states* about its sender is believed (the old ``x-corral-user``,
``-uid``, ``-gid`` headers are ignored). An identity comes from, in this order:

- the kernel: a caller on ctld's Unix socket is the uid/gid SO_PEERCRED reports
  (``auth.type = "local"``, always accepted on the socket);
- a MUNGE credential (``x-corral-munge``) when ``auth.type = "munge"``: uid/gid are
  munged's, the credential is bound to the method, used once, within ``auth.ttl_s``;
- a JWT (``authorization: Bearer``) whenever ``auth.jwt_key`` is set: it names a user.

Either way the user name, primary group and supplementary groups come from the user
database (corral.auth.users), and a gid must be one of the user's groups. Handlers
only ever see an Identity; what it may do is ctld/model/authz.py's business.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from corral.auth import MUNGE_KEY, TOKEN_KEY
from corral.auth.users import identity_of, identity_of_name
from corral.config import AuthConfig
from corral.errors import Unauthenticated
from corral.identity import Identity
from ctld.model.authz import Policy

__all__ = [
    "Authenticator",
    "Caller",
    "ClusterAuthenticator",
    "Policy",
    "StepCredentials",
    "munge_payload",
]


class StepCredentials:
    """An HMAC per step, keyed by a secret of this ctld process: CreateStep gives it to
    the step's creator, GetStep (mutual TLS) to the nodes; noded runs a step's tasks
    only for a RunTasks that shows it. The key is derived from ctld's TLS key when there
    is one (ctld.daemon.server.step_key: every controller of the list, and a restarted ctld,
    issue the same credentials), else random per process."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key or os.urandom(32)

    def issue(self, job_id: int, step_id: int) -> str:
        msg = f"step:{job_id}.{step_id}".encode()
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Caller:
    """What a transport knows about a request's sender."""

    metadata: Mapping[str, str] = field(default_factory=dict)
    method: str = ""
    peer_uid: int | None = None  # SO_PEERCRED, on the Unix socket only
    peer_gid: int | None = None
    peer_cert: str = ""  # the common name of a verified TLS client certificate (daemons)


class Authenticator(Protocol):
    def identify(self, caller: Caller) -> Identity: ...


def munge_payload(method: str) -> bytes:
    """What a MUNGE credential carries: the method it is good for."""
    return f"corral:{method}".encode()


class ClusterAuthenticator:
    """The configured methods, tried in a fixed order (see the module's docstring)."""

    def __init__(self, config: AuthConfig, jwt_key: bytes | None = None) -> None:
        self.config = config
        self.jwt_key = jwt_key
        self._munge = None
        if config.type == "munge":
            from corral.auth.munge import Verifier

            self._munge = Verifier(config.munge_socket, config.ttl_s)

    def identify(self, caller: Caller) -> Identity:
        if caller.peer_uid is not None:
            return identity_of(caller.peer_uid, caller.peer_gid)
        md = caller.metadata
        cred = md.get(MUNGE_KEY, "")
        if cred and self._munge is not None:
            uid, gid = self._munge.verify(cred, munge_payload(caller.method))
            return identity_of(uid, gid)
        bearer = md.get(TOKEN_KEY, "")
        if bearer and self.jwt_key is not None:
            from corral.auth.tokens import verify

            scheme, _, token = bearer.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise Unauthenticated("Access/permission denied: authorization is not Bearer")
            return identity_of_name(verify(self.jwt_key, token.strip()))
        raise Unauthenticated(
            "Access/permission denied: no credential (auth.type is "
            f"{self.config.type}: use ctld's Unix socket"
            + (", a MUNGE credential" if self._munge is not None else "")
            + (", or a token (SLURM_JWT)" if self.jwt_key is not None else "")
            + ")"
        )
