"""Who may scrape ``/metrics``, and what a scrape shows (docs/admin-guide.md, "Metrics";
docs/security.md, "ctld's HTTP port").

A scrape carries the bearer token of ``controller.metrics_token_file`` (Prometheus:
``authorization: {credentials_file: ...}``), compared in constant time; anything else
is answered 401 before a series is read. No file configured: every scrape is refused.
The file is checked as the JWT key is (ctld/daemon/preflight.py: readable by its owner alone,
root or ctld's user; long enough), and read again when it changes, so a token is
rotated without a restart.

What a scrape shows follows ``private_data`` as squeue, sacct and the web page do:
with ``jobs`` or ``accounting`` in it the series by user and account are left out
(``HIDES_USERS``; ctld/telemetry/metrics.py). Slurm goes further: any PrivateData turns its
metrics off.
"""

from __future__ import annotations

import hmac
import os
import stat

import structlog

from corral.config import ClusterConfig
from corral.errors import ConfigError

log = structlog.get_logger("ctld.telemetry.metrics")

TOKEN_MIN_CHARS = 32
CHALLENGE = 'Bearer realm="corral metrics"'
# private_data words that leave out the families by user and account
HIDES_USERS = frozenset({"jobs", "accounting"})


def read_token(path: str) -> bytes:
    """The token in ``path`` (surrounding white space dropped, as Prometheus drops it
    from its credentials file); ConfigError naming what is wrong with the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the metrics token: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: the metrics token is not a regular file")
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    if st.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"{path}: the metrics token must be root's or ctld's user's")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the metrics token must be readable by its owner only")
    token = raw.strip()
    if len(token) < TOKEN_MIN_CHARS:
        raise ConfigError(f"{path}: the metrics token is shorter than {TOKEN_MIN_CHARS} characters")
    if not all(0x21 <= b <= 0x7E for b in token):  # what an Authorization header carries
        raise ConfigError(f"{path}: the metrics token must be printable ASCII without spaces")
    return token


def how_to_make(path: str) -> str:
    return (
        f"make one: openssl rand -hex 32 > {path}; chmod 600 {path}; owned by the user "
        "ctld runs as; give Prometheus the same token (docs/admin-guide.md, Metrics)"
    )


class MetricsAccess:
    def __init__(self, config: ClusterConfig) -> None:
        self.path = config.controller.metrics_token_file
        self._token: bytes | None = None
        self._seen: tuple[int, ...] | None = None  # the file last read: dev, ino, times
        self._error = ""  # the last cause logged
        if not self.path:
            self.refusal = (
                "/metrics needs a bearer token and controller.metrics_token_file is not "
                "set: every scrape is refused (docs/admin-guide.md, Metrics)\n"
            )
        else:
            self.refusal = "/metrics needs the bearer token of controller.metrics_token_file\n"

    def token(self) -> bytes | None:
        """The token now: read again when the file changed; None (every scrape refused)
        while it is missing or fails the check (logged once per cause)."""
        if not self.path:
            return None
        try:
            st = os.stat(self.path)
            # ctime: a chmod or chown is a change too (the file's check may fail now)
            seen: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            seen = None
        if seen is not None and seen == self._seen:
            return self._token
        self._seen = seen
        try:
            self._token, self._error = read_token(self.path), ""
        except ConfigError as exc:
            self._token = None
            if str(exc) != self._error:
                self._error = str(exc)
                log.error("metrics token unusable: every scrape refused", error=self._error)
        return self._token

    def allows(self, authorization: str) -> bool:
        """Whether an ``Authorization`` header carries the token."""
        scheme, _, credentials = authorization.partition(" ")
        token = self.token()
        if token is None or scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credentials.strip().encode("utf-8", "replace"), token)
