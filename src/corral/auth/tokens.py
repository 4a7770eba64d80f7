"""JSON Web Tokens (HS256), as Slurm's auth/jwt: ``sun`` names the user, ``exp`` ends it.

The key is a file only its owner (root, or the account ctld runs as) can read: whoever
can read it can mint a token for anyone, so ``corral token`` is an administrator's
command. A token names a user, never a uid or group: ctld looks those up.
"""

from __future__ import annotations

import os
import secrets
import stat
import time

from corral.errors import ConfigError, PermissionDenied

ALGORITHM = "HS256"
KEY_BYTES = 32
MAX_TOKEN_CHARS = 4096


def read_key(path: str) -> bytes:
    """The key in ``path``; refused if others can read it (a key anyone reads is no key)."""
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            key = fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the JWT key: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the JWT key must be readable by its owner only (chmod 600)")
    if len(key) < KEY_BYTES:
        raise ConfigError(f"{path}: the JWT key is shorter than {KEY_BYTES} bytes")
    return key


def write_key(path: str) -> None:
    """A new random key, created owner-only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(KEY_BYTES))


def issue(key: bytes, user: str, lifetime_s: int, now: float | None = None) -> str:
    import jwt

    iat = int(now if now is not None else time.time())
    return jwt.encode({"sun": user, "iat": iat, "exp": iat + lifetime_s}, key, ALGORITHM)


def verify(key: bytes, token: str) -> str:
    """The user a valid token names; PermissionDenied for a bad signature, expiry, garbage."""
    import jwt

    if len(token) > MAX_TOKEN_CHARS:
        raise PermissionDenied("Access/permission denied: the token is too long")
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], options={"require": ["exp", "sun"]})
    except jwt.ExpiredSignatureError:
        raise PermissionDenied("Access/permission denied: the token has expired") from None
    except jwt.InvalidTokenError as exc:
        raise PermissionDenied(f"Access/permission denied: invalid token ({exc})") from None
    user = claims.get("sun")
    if not isinstance(user, str) or not user:
        raise PermissionDenied("Access/permission denied: the token names no user")
    return user


def read_token_file(path: str) -> str:
    """A token saved in a file: only when no one but its owner can read it."""
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionDenied(f"{path}: a token file must be yours and readable by you only")
    with open(path) as fh:
        return fh.read().strip()
