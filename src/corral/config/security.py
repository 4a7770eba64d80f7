"""``[auth]`` (how users prove who they are) and ``[tls]`` (mutual TLS between the
daemons); docs/security.md."""

from __future__ import annotations

from dataclasses import dataclass

from corral.config.section import Section
from corral.errors import ConfigError

AUTH_TYPES = ("local", "munge", "jwt")


@dataclass(frozen=True)
class AuthConfig:
    """How users prove who they are (docs/security.md)."""

    type: str = "local"  # local (Unix socket, SO_PEERCRED), munge or jwt
    jwt_key: str = ""  # HS256 key file (root only); set: tokens are accepted besides type
    munge_socket: str = ""  # empty: libmunge's default (/run/munge/munge.socket.2)
    ttl_s: int = 300  # oldest credential accepted


@dataclass(frozen=True)
class TlsConfig:
    """Mutual TLS between the daemons, from ``corral certs``."""

    dir: str = ""  # ca.crt, ctld.crt/.key, <node>.crt/.key; empty: plaintext (a warning)
    clients: bool = False  # TLS on the client ports too (HTTP gateway, gRPC Controller)

    @property
    def enabled(self) -> bool:
        return bool(self.dir)


def parse_auth(sec: Section) -> AuthConfig:
    d = AuthConfig()
    cfg = AuthConfig(
        type=sec.get("type", str, d.type),
        jwt_key=sec.get("jwt_key", str, d.jwt_key),
        munge_socket=sec.get("munge_socket", str, d.munge_socket),
        ttl_s=sec.positive("ttl_s", d.ttl_s, allow_zero=False),
    )
    sec.done()
    if cfg.type not in AUTH_TYPES:
        raise ConfigError(f"{sec.key('type')}: {cfg.type!r} is not local, munge or jwt")
    if cfg.type == "jwt" and not cfg.jwt_key:
        raise ConfigError(f'{sec.key("jwt_key")}: type = "jwt" needs a key file')
    return cfg


def parse_tls(sec: Section) -> TlsConfig:
    cfg = TlsConfig(dir=sec.get("dir", str, ""), clients=sec.get("clients", bool, False))
    sec.done()
    if cfg.clients and not cfg.dir:
        raise ConfigError(f"{sec.key('clients')}: needs tls.dir (the certificates)")
    return cfg
