"""What ctld checks before it listens: the credentials its config names are there.

A problem that can only be fixed by the operator and that leaves every remote user
refused stops ctld at once, naming the file or package, instead of ctld logging
"listening" and then failing (or serving and refusing everyone):

- ``auth.jwt_key`` set: the key file must be readable, owner-only and long enough
  (the same check as when it is used), else ``ConfigError`` naming the file and how to
  make one.
- ``auth.type = "munge"``: libmunge must load on this host, else ``ConfigError``: with
  no library no MUNGE credential can ever be decoded here until the package is
  installed. munged itself not answering is only a warning (returned): systemd may
  start it after ctld, the Unix socket and tokens still work meanwhile, and each
  refused credential names the cause.
- ``controller.metrics_token_file`` set: the token file must be readable, owner-only
  (root's or ctld's user's), and long enough (ctld/telemetry/metrics_access.py), else
  ``ConfigError`` naming the file and how to make one; not set: a warning (every
  scrape of ``/metrics`` is refused).
"""

from __future__ import annotations

from corral.config import ClusterConfig
from corral.errors import ConfigError, CorralError

DEFAULT_MUNGE_SOCKET = "/run/munge/munge.socket.2"  # libmunge's default


def check_auth(config: ClusterConfig) -> list[str]:
    """Raise ConfigError for what makes ctld useless; return warnings for the rest."""
    auth = config.auth
    if auth.jwt_key:
        from corral.auth.tokens import read_key

        try:
            read_key(auth.jwt_key)
        except ConfigError as exc:
            raise ConfigError(
                f"auth.jwt_key: {exc} (make the key once: head -c 32 /dev/urandom > "
                f"{auth.jwt_key}; chmod 600 {auth.jwt_key}; owned by the user ctld runs "
                "as; or remove auth.jwt_key to turn tokens off)"
            ) from None
    if auth.type != "munge":
        return []
    from corral.auth import munge

    try:
        munge.check_library()
    except CorralError as exc:
        raise ConfigError(
            f'auth.type = "munge" but {exc}: install the munge package on every host '
            "(apt-get install munge, or dnf install munge) with one shared "
            "/etc/munge/munge.key, or choose another auth.type (docs/security.md)"
        ) from None
    socket = auth.munge_socket or DEFAULT_MUNGE_SOCKET
    try:
        munge.encode(b"corral:preflight", auth.munge_socket)
    except CorralError as exc:
        return [
            f'auth.type = "munge" but munged does not answer at {socket} ({exc}): commands '
            "on other hosts are refused until it runs (systemctl enable --now munge)"
        ]
    return []


def check_metrics(config: ClusterConfig) -> list[str]:
    """Raise ConfigError for a metrics token file that cannot be used; a warning when
    there is none (``/metrics`` then refuses every scrape)."""
    from ctld.telemetry.metrics_access import how_to_make, read_token

    path = config.controller.metrics_token_file
    if not path:
        return [
            "controller.metrics_token_file is not set: /metrics answers 401 to every "
            "scrape (docs/admin-guide.md, Metrics)"
        ]
    try:
        read_token(path)
    except ConfigError as exc:
        raise ConfigError(f"controller.metrics_token_file: {exc} ({how_to_make(path)})") from None
    return []
