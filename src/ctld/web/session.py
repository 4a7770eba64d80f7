"""Browser sessions: one-time login tokens, signed expiring session cookies, CSRF tokens.

A user gets a login URL from ``corral web-login`` (the CreateWebLogin RPC, which
authenticates like every other command: the kernel on ctld's socket, MUNGE or JWT). Its
token is random, single-use and short-lived (``web.login_ttl``), kept in memory as a
hash. The browser trades it (a POST) for a session cookie: the uid, when it was issued
and when it expires, and a session id, signed with HMAC-SHA256 under a key in ctld's
state dir (``web.key``, 0600, made on first start). The cookie is HttpOnly,
SameSite=Strict, and Secure when the page is served over TLS. The CSRF token of a
session is an HMAC of its id: every POST must carry it. Logging out revokes the
session id until it would have expired anyway.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.errors import ConfigError, InvalidRequest

KEY_FILE = "web.key"
COOKIE = "corral_session"
MAX_LOGINS = 10000  # outstanding login tokens at once (each is a few dozen bytes)


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
    """Constant-time; bytes, so a non-ASCII cookie or field is a mismatch, not an error."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Session:
    uid: int
    issued: float
    expires: float
    sid: str


class Sessions:
    def __init__(
        self, key: bytes, lifetime_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.key = key
        self.lifetime_s = lifetime_s
        self.clock = clock
        self.revoked: dict[str, float] = {}  # session id -> when it would expire

    def _mac(self, payload: str) -> str:
        return _b64(
            hmac.new(self.key, b"corral web session\0" + payload.encode(), "sha256").digest()
        )

    def issue(self, uid: int) -> tuple[str, Session]:
        now = self.clock()
        s = Session(uid, now, now + self.lifetime_s, _b64(secrets.token_bytes(16)))
        payload = f"v1.{s.uid}.{int(s.issued)}.{int(s.expires)}.{s.sid}"
        return f"{payload}.{self._mac(payload)}", s

    def check(self, cookie: str) -> Session | None:
        """The session a cookie carries; None when forged, expired or logged out."""
        payload, _, mac = cookie.rpartition(".")
        if not payload or not _same(mac, self._mac(payload)):
            return None
        parts = payload.split(".")
        if len(parts) != 5 or parts[0] != "v1" or not all(p.isdigit() for p in parts[1:4]):
            return None
        s = Session(int(parts[1]), float(parts[2]), float(parts[3]), parts[4])
        now = self.clock()
        if now >= s.expires or s.sid in self.revoked:
            return None
        return s

    def alive(self, s: Session) -> bool:
        """Not expired, not logged out (an open page's stream checks this)."""
        return self.clock() < s.expires and s.sid not in self.revoked

    def csrf(self, s: Session) -> str:
        return _b64(hmac.new(self.key, b"corral web csrf\0" + s.sid.encode(), "sha256").digest())

    def csrf_ok(self, s: Session, token: str) -> bool:
        return bool(token) and _same(token, self.csrf(s))

    def revoke(self, s: Session) -> None:
        now = self.clock()
        for sid in [k for k, until in self.revoked.items() if until <= now]:
            del self.revoked[sid]
        self.revoked[s.sid] = s.expires


class Logins:
    """One-time login tokens: uid by the token's hash, until used or expired."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._tokens: dict[bytes, tuple[int, float]] = {}

    @staticmethod
    def _hash(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def _expire(self, now: float) -> None:
        for h in [h for h, (_, until) in self._tokens.items() if until <= now]:
            del self._tokens[h]

    def issue(self, uid: int) -> tuple[str, float]:
        now = self.clock()
        if len(self._tokens) >= MAX_LOGINS:
            self._expire(now)
            if len(self._tokens) >= MAX_LOGINS:
                raise InvalidRequest("too many web logins outstanding: try again in a minute")
        token = _b64(secrets.token_bytes(32))
        expires = now + self.ttl_s
        self._tokens[self._hash(token)] = (uid, expires)
        return token, expires

    def peek(self, token: str) -> int | None:
        """The uid a token is good for, without using it up (the confirmation page)."""
        found = self._tokens.get(self._hash(token))
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    def use(self, token: str) -> int | None:
        """The uid, once: the token is gone after this."""
        found = self._tokens.pop(self._hash(token), None)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]
