"""A tiny client for ctld's JSON gateway, standard library only.

The short-lived commands (sbatch, squeue, ...) call ctld through this instead of
gRPC: ``import grpc`` alone costs more than the whole budget of a command. The
messages are the proto's own, in proto3's JSON mapping (camelCase keys, enums as
names, 64-bit integers as strings), posted to ``/corral.v1.Controller/<Method>``.

Who calls is never stated: over ctld's Unix socket the kernel tells ctld
(``auth.type = "local"``); over TCP the request carries a credential: a token from
``SLURM_JWT`` (or the owner-only file ``CORRAL_TOKEN_FILE``), else a MUNGE credential
when the cluster uses munge (docs/security.md).
"""

from __future__ import annotations

import json
import os
import socket

from corral.errors import ControllerUnavailable, CorralError, TooLarge, from_wire
from corral.identity import Identity, current_identity

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

ADDRESS_ENV = "CORRAL_CTLD_HTTP"
SOCKET_ENV = "CORRAL_CTLD_SOCKET"
AUTH_ENV = "CORRAL_AUTH_TYPE"  # munge, jwt, local: what to send over TCP
MUNGE_SOCKET_ENV = "CORRAL_MUNGE_SOCKET"
CA_ENV = "CORRAL_CTLD_CA"  # the cluster CA: TLS to ctld's HTTP port
TOKEN_FILE_ENV = "CORRAL_TOKEN_FILE"
TIMEOUT_ENV = "CORRAL_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 8 * 1024 * 1024  # corral.limits.MAX_REQUEST_BYTES (not imported: slow)


def _config() -> dict[str, Any]:
    import tomllib

    from corral.config import config_path  # only when no env.sh was sourced

    path = config_path()
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ControllerUnavailable(
            f"cannot find the controller: set {ADDRESS_ENV} or CORRAL_CONF ({path}: {exc})"
        ) from None


def controller_socket() -> str:
    """ctld's Unix socket if it is to be used: $CORRAL_CTLD_SOCKET, else the config's
    (when no TCP address is set in the environment and the socket is there)."""
    value = os.environ.get(SOCKET_ENV)
    if value is not None or os.environ.get(ADDRESS_ENV):
        return value or ""
    ctl = _config().get("controller", {})
    from corral.config import DEFAULT_SOCKET

    path = str(ctl.get("socket", DEFAULT_SOCKET))
    return path if path.startswith("@") or os.path.exists(path) else ""


def controller_address() -> tuple[str, int]:
    """host and port of ctld's HTTP gateway: $CORRAL_CTLD_HTTP, else the config file."""
    value = os.environ.get(ADDRESS_ENV)
    if not value:
        ctl = _config().get("controller", {})
        from corral.config import DEFAULT_HTTP_PORT

        return str(ctl.get("host", "127.0.0.1")), int(ctl.get("http_port", DEFAULT_HTTP_PORT))
    host, _, port = value.rpartition(":")
    if not host or not port.isdecimal():
        raise ControllerUnavailable(f"{ADDRESS_ENV}={value!r} is not host:port")
    return host.strip("[]"), int(port)


class Client:
    """Calls one Controller method per request; each call is one short connection.

    ``identity`` is who this process is (the commands use it to fill filters); it is
    never sent: ctld learns it from the socket or from the credential.
    """

    def __init__(
        self,
        address: tuple[str, int] | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
        *,
        socket_path: str | None = None,
        token: str | None = None,
    ) -> None:
        self.socket_path = socket_path if socket_path is not None else ""
        if socket_path is None and address is None:
            self.socket_path = controller_socket()
        self.address = address or (("", 0) if self.socket_path else controller_address())
        self.identity = identity or current_identity()
        self.timeout = timeout or float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        self.token = token

    def _credential(self, method: str) -> str:
        """Header lines proving who calls over TCP (none on the Unix socket)."""
        if self.socket_path:
            return ""
        token = self.token or os.environ.get("SLURM_JWT", "")
        if not token and os.environ.get(TOKEN_FILE_ENV):
            from corral.auth.tokens import read_token_file

            token = read_token_file(os.environ[TOKEN_FILE_ENV])
        if token:
            return f"Authorization: Bearer {token}\r\n"
        kind = os.environ.get(AUTH_ENV)
        munge_socket = os.environ.get(MUNGE_SOCKET_ENV, "")
        if kind is None and not os.environ.get(ADDRESS_ENV):
            auth = _config().get("auth", {})
            kind, munge_socket = str(auth.get("type", "local")), str(auth.get("munge_socket", ""))
        if kind == "munge":
            from corral.auth.munge import encode

            return f"x-corral-munge: {encode(f'corral:{method}'.encode(), munge_socket)}\r\n"
        return ""

    def _connect(self) -> socket.socket:
        if self.socket_path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            path = self.socket_path
            sock.connect("\0" + path[1:] if path.startswith("@") else path)
            return sock
        host, port = self.address
        # an ASCII host as bytes skips the idna codec import (~2.5 ms per command)
        host_arg: str | bytes = host.encode() if host.isascii() else host
        plain = socket.create_connection((host_arg, port), timeout=self.timeout)  # type: ignore[arg-type]
        ca = os.environ.get(CA_ENV)
        if not ca:
            return plain
        import ssl

        ctx = ssl.create_default_context(cafile=ca)
        return ctx.wrap_socket(plain, server_hostname="ctld")

    def where(self) -> str:
        return self.socket_path or f"{self.address[0]}:{self.address[1]}"

    def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(request, separators=(",", ":")).encode()
        if len(body) > MAX_REQUEST_BYTES:
            part, size = _largest_part(request)
            raise TooLarge(
                f"the request is too large: {len(body)} bytes (the largest part, {part}, is "
                f"{size} bytes); the controller accepts at most {MAX_REQUEST_BYTES} bytes"
            )
        head = (
            f"POST /corral.v1.Controller/{method} HTTP/1.1\r\n"
            f"Host: {self.address[0] or 'ctld'}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"{self._credential(method)}"
            "Connection: close\r\n\r\n"
        ).encode()
        try:
            with self._connect() as sock:
                sock.sendall(head + body)
                chunks = []
                while True:
                    chunk = sock.recv(262144)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except OSError as exc:
            raise ControllerUnavailable(
                f"Unable to contact slurm controller (connect failure) at "
                f"{self.where()}: {exc.strerror or exc}"
            ) from None
        return _parse_response(b"".join(chunks))


def _largest_part(request: dict[str, Any]) -> tuple[str, int]:
    """The biggest field of a request, two levels deep (to say what was too large)."""
    best = ("", 0)
    for key, value in request.items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        for name, item in items:
            size = len(json.dumps(item, separators=(",", ":")))
            if size > best[1]:
                best = (name, size)
    return best


def _parse_response(raw: bytes) -> dict[str, Any]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ControllerUnavailable("the controller closed the connection without an answer")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdecimal():
        raise CorralError(f"the controller sent a malformed answer: {lines[0]!r}")
    status = int(parts[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    try:
        payload: dict[str, Any] = json.loads(body) if body else {}
    except ValueError:
        if status == 413:
            raise TooLarge(
                f"the request is too large for the controller (limit {MAX_REQUEST_BYTES} bytes)"
            ) from None
        raise CorralError(f"the controller sent invalid JSON (HTTP {status})") from None
    if status != 200:
        raise from_wire(str(payload.get("error", "")), str(payload.get("message", body[:200])))
    return payload


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)
