"""Browser sessions: one-time login tokens, signed expiring session tokens, sign-outs.

A user gets a login URL from ``corral web-login`` (the CreateWebLogin RPC, which
authenticates like every other command: the kernel on ctld's socket, MUNGE or JWT). Its
token is random, single-use and short-lived (``web.login_ttl``), kept in memory as a
hash; a user has at most ``MAX_LOGINS_PER_USER`` outstanding (a newer one gives up the
user's oldest), so one user's URLs never crowd out another's.

The page's script trades it (a POST) for a session token: the uid, when it was issued
(ms) and when it expires, and a random id, signed with HMAC-SHA256 under a key in
ctld's state dir (``web.key``, 0600, made on first start). The token is never a cookie:
a browser sends a host's cookies to every port of that host, where any local user may
listen. The page keeps it in its origin's localStorage (scheme, host and port) and
sends it in an ``Authorization`` header (docs/security.md, "Browser sessions"). A
sign-out moves its user's not-before past the session's issue time (``signouts.py``:
kept in a file, so it holds across a restart), which ends that user's sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from corral.errors import ConfigError, InvalidRequest
from ctld.web.signouts import SignOuts

KEY_FILE = "web.key"
VERSION = "v2"  # v1 was a cookie: never accepted again
MAX_TOKEN_CHARS = 256
MAX_LOGINS_PER_USER = 8  # outstanding login URLs of one user: a newer one drops the oldest
MAX_LOGINS = 100_000  # of all users together (each is a few dozen bytes)


def load_key(state_dir: str) -> bytes:
    """The session key in ``state_dir``: made on first use (0600), refused when another
    user owns it or others may read it (a key they read would let them forge sessions)."""
    path = os.path.join(state_dir, KEY_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the web session key: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.geteuid() or mode & 0o077:
            raise ConfigError(
                f"{path}: the web session key must be ctld's own and mode 0600 "
                f"(it is owned by uid {st.st_uid}, mode {mode:04o})"
            )
        key = fh.read()
    if len(key) < 32:
        raise ConfigError(f"{path}: the web session key is shorter than 32 bytes")
    return key


def _same(given: str, expected: str) -> bool:
    """Constant-time; bytes, so a non-ASCII token or field is a mismatch, not an error."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Session:
    uid: int
    issued_ms: int  # ms: a sign-out in the same second as a sign-in tells them apart
    expires: int
    sid: str


class Sessions:
    def __init__(
        self,
        key: bytes,
        lifetime_s: int,
        signouts: SignOuts,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self.lifetime_s = lifetime_s
        self.signouts = signouts
        self.clock = clock

    def _mac(self, payload: str) -> str:
        return _b64(
            hmac.new(self.key, b"corral web session v2\0" + payload.encode(), "sha256").digest()
        )

    def issue(self, uid: int) -> tuple[str, Session]:
        # never before the user's not-before, even with the clock set back since
        issued = max(int(self.clock() * 1000), self.signouts.not_before(uid))
        s = Session(uid, issued, issued // 1000 + self.lifetime_s, _b64(secrets.token_bytes(16)))
        payload = f"{VERSION}.{s.uid}.{s.issued_ms}.{s.expires}.{s.sid}"
        return f"{payload}.{self._mac(payload)}", s

    def check(self, token: str) -> Session | None:
        """The session a token carries; None when forged, expired, of the previous
        version, or signed out."""
        if len(token) > MAX_TOKEN_CHARS:
            return None
        payload, _, mac = token.rpartition(".")
        if not payload or not _same(mac, self._mac(payload)):
            return None
        parts = payload.split(".")
        if len(parts) != 5 or parts[0] != VERSION or not all(p.isdigit() for p in parts[1:4]):
            return None
        s = Session(int(parts[1]), int(parts[2]), int(parts[3]), parts[4])
        # a token made when web.session was longer counts no longer than it is now
        if s.expires * 1000 - s.issued_ms > self.lifetime_s * 1000:
            return None
        return s if self.alive(s) else None

    def alive(self, s: Session) -> bool:
        """Not expired, not signed out (an open page's stream checks this)."""
        return self.clock() < s.expires and s.issued_ms >= self.signouts.not_before(s.uid)

    def sign_out(self, s: Session) -> None:
        """``s`` and every other session of its user issued so far end (durably: this
        writes a file; call it off the event loop)."""
        self.signouts.sign_out(s.uid, max(int(self.clock() * 1000), s.issued_ms + 1))


class Logins:
    """One-time login tokens: uid by the token's hash, until used or expired; per user
    at most MAX_LOGINS_PER_USER, oldest first out."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._tokens: dict[bytes, tuple[int, float]] = {}
        self._of_user: dict[int, deque[bytes]] = {}  # each user's, oldest first

    def __len__(self) -> int:
        return len(self._tokens)

    @staticmethod
    def _hash(token: str) -> bytes:
        return hashlib.sha256(token.encode("utf-8", "replace")).digest()

    def _sweep(self, now: float) -> None:
        """Every expired token goes: only when all users' together reach MAX_LOGINS."""
        for h in [h for h, (_, until) in self._tokens.items() if until <= now]:
            self._forget(h)

    def _forget(self, h: bytes) -> tuple[int, float] | None:
        found = self._tokens.pop(h, None)
        if found is not None:
            mine = self._of_user[found[0]]
            mine.remove(h)  # at most MAX_LOGINS_PER_USER long
            if not mine:
                del self._of_user[found[0]]
        return found

    def issue(self, uid: int) -> tuple[str, float]:
        now = self.clock()
        mine = self._of_user.get(uid, ())
        while mine and (len(mine) >= MAX_LOGINS_PER_USER or self._tokens[mine[0]][1] <= now):
            self._forget(mine[0])  # expired, or the user's oldest beyond the limit
            mine = self._of_user.get(uid, ())
        if len(self._tokens) >= MAX_LOGINS:
            self._sweep(now)
            if len(self._tokens) >= MAX_LOGINS:
                raise InvalidRequest("too many web logins outstanding: try again in a minute")
        token = _b64(secrets.token_bytes(32))
        expires = now + self.ttl_s
        h = self._hash(token)
        self._tokens[h] = (uid, expires)
        self._of_user.setdefault(uid, deque()).append(h)
        return token, expires

    def peek(self, token: str) -> int | None:
        """The uid a token is good for, without using it up (the confirmation page)."""
        found = self._tokens.get(self._hash(token))
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    def use(self, token: str) -> int | None:
        """The uid, once: the token is gone after this."""
        found = self._forget(self._hash(token))
        if found is None or found[1] <= self.clock():
            return None
        return found[0]
