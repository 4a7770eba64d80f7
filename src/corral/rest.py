"""The HTTP/JSON transport to ctld's gateway, standard library only.

corral.api's HttpController (the typed client the short-lived commands use) sends
through this instead of gRPC: ``import grpc`` alone costs more than the whole budget
of a command. The messages are the proto's own, in proto3's JSON mapping (camelCase keys, enums as
names, 64-bit integers as strings), posted to ``/corral.v1.Controller/<Method>``.

Who calls is never stated: over ctld's Unix socket the kernel tells ctld
(``auth.type = "local"``); over TCP the request carries a credential
(``credential_headers``): a token from ``SLURM_JWT`` (or the owner-only file
``CORRAL_TOKEN_FILE``), else a MUNGE credential when the cluster uses munge
(docs/security.md). Every request says which corral sent it (``VERSION_KEY``): ctld
judges it against its compatibility window (ctld/control/versions.py, docs/upgrading.md).
"""

from __future__ import annotations

import _socket
import os
import sys

from corral import __version__
from corral.cjson import dumps, loads
from corral.errors import ControllerUnavailable, CorralError, NotPrimary, TooLarge, from_wire

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

ADDRESS_ENV = "CORRAL_CTLD_HTTP"
SOCKET_ENV = "CORRAL_CTLD_SOCKET"
AUTH_ENV = "CORRAL_AUTH_TYPE"  # munge, jwt, local: what to send over TCP
MUNGE_SOCKET_ENV = "CORRAL_MUNGE_SOCKET"
CA_ENV = "CORRAL_CTLD_CA"  # the cluster CA: TLS to ctld's HTTP port
TOKEN_FILE_ENV = "CORRAL_TOKEN_FILE"
TOKEN_ENV = "SLURM_JWT"
TIMEOUT_ENV = "CORRAL_TIMEOUT"
CTLD_USER_ENV = "CORRAL_CTLD_USER"  # who runs ctld (controller.user), besides root
DEFAULT_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 8 * 1024 * 1024  # corral.limits.MAX_REQUEST_BYTES (not imported: slow)
# the sender's corral version: an HTTP header, or gRPC metadata (the same lower-case key)
VERSION_KEY = "x-corral-version"


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
            f"{ENV_HINT}"
        ) from None


def _raw_controllers(ctl: dict[str, Any]) -> list[dict[str, Any]]:
    """controller.hosts from the raw TOML (each entry with the [controller] defaults
    filled in), or the one controller of the table; corral.config checks them."""
    from corral.config import DEFAULT_HTTP_PORT, DEFAULT_SOCKET

    base = {
        "host": ctl.get("host", "127.0.0.1"),
        "http_port": ctl.get("http_port", DEFAULT_HTTP_PORT),
        "socket": ctl.get("socket", DEFAULT_SOCKET),
    }
    hosts = ctl.get("hosts") or [base]
    return [{**base, **({"host": h} if isinstance(h, str) else h)} for h in hosts]


def controller_sockets() -> list[str]:
    """Each controller's Unix socket, in order, "" where it is not to be used:
    $CORRAL_CTLD_SOCKET (comma-separated), else the config's (those that exist), none
    when only $CORRAL_CTLD_HTTP is set."""
    value = os.environ.get(SOCKET_ENV)
    if value is not None or os.environ.get(ADDRESS_ENV):
        return [v.strip() for v in (value or "").split(",")]
    out = []
    for entry in _raw_controllers(_config().get("controller", {})):
        path = str(entry["socket"])
        out.append(path if path.startswith("@") or (path and os.path.exists(path)) else "")
    return out


def controller_socket() -> str:
    """ctld's Unix socket if it is to be used (the first controller's with a socket)."""
    return next((s for s in controller_sockets() if s), "")


DEFAULT_MUNGE_SOCKET = "/run/munge/munge.socket.2"  # libmunge's own default

# why the last credential_headers() sent nothing over TCP ("" when it sent one): said
# beside ctld's "no credential" refusal, so the user learns what to set
_unsent = ""


def credential_headers(method: str, token: str | None = None) -> list[tuple[str, str]]:
    """What proves who calls over TCP (HTTP headers or gRPC metadata, the same keys):
    a token, else a MUNGE credential for ``method`` when the cluster uses munge (or, with
    no config on this host, when munged runs here, as Slurm's commands always send one)."""
    global _unsent
    token = token or os.environ.get(TOKEN_ENV, "")
    if not token and os.environ.get(TOKEN_FILE_ENV):
        from corral.auth.tokens import read_token_file

        token = read_token_file(os.environ[TOKEN_FILE_ENV])
    if token:
        _unsent = ""
        return [("authorization", f"Bearer {token}")]
    kind, munge_socket, why = _auth_choice()
    if kind == "munge":
        from corral.auth.munge import encode

        _unsent = ""
        return [("x-corral-munge", encode(f"corral:{method}".encode(), munge_socket))]
    _unsent = why
    return []


def _auth_choice() -> tuple[str, str, str]:
    """(kind, munged's socket, why nothing is sent): $CORRAL_AUTH_TYPE, else the config's
    [auth] (read even beside $CORRAL_CTLD_HTTP: it says what ctld expects), else munge
    when munged answers here."""
    munge_socket = os.environ.get(MUNGE_SOCKET_ENV, "")
    kind = os.environ.get(AUTH_ENV)
    if kind is not None:
        return kind, munge_socket, f"{AUTH_ENV}={kind} sends no credential"
    from corral.config import config_path

    try:
        auth = _config().get("auth", {})
    except ControllerUnavailable:  # no config here: a login node set up by environment
        path = munge_socket or DEFAULT_MUNGE_SOCKET
        if os.path.exists(path):
            return "munge", path, ""
        return (
            "",
            "",
            f"this command sent none: no {TOKEN_ENV} or {TOKEN_FILE_ENV}, no config file "
            f"({config_path()}) and no munged at {path} (install munge with the cluster's "
            f"key, or get a token: corral token)",
        )
    kind = str(auth.get("type", "local"))
    why = (
        f'this command sent none: auth.type is "{kind}" in {config_path()}, which sends '
        f"nothing over TCP; use ctld's Unix socket ({SOCKET_ENV}) or a token ({TOKEN_ENV})"
    )
    return kind, munge_socket or str(auth.get("munge_socket", "")), why


def unsent_credential() -> str:
    """Why the last request over TCP carried no credential ("" if it carried one)."""
    return _unsent


# what a user who started a cluster with `corral up` and opened a new shell needs
ENV_HINT = " (for a cluster started by `corral up`: source STATE_DIR/env.sh)"


def controller_addresses() -> list[tuple[str, int]]:
    """host and port of each controller's HTTP gateway, in order: $CORRAL_CTLD_HTTP
    (host:port, comma-separated), else the config file's controller.hosts."""
    value = os.environ.get(ADDRESS_ENV)
    if not value:
        ctl = _config().get("controller", {})
        return [(str(e["host"]), int(e["http_port"])) for e in _raw_controllers(ctl)]
    out = []
    for item in value.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdecimal():
            raise ControllerUnavailable(f"{ADDRESS_ENV}={value!r} is not host:port[,host:port]")
        out.append((host.strip("[]"), int(port)))
    return out


def controller_address() -> tuple[str, int]:
    """host and port of the first controller's HTTP gateway."""
    return controller_addresses()[0]


def controller_targets() -> list[tuple[str, int] | str]:
    """Where to reach each controller, in order: its Unix socket when there is one to
    use, else its HTTP address."""
    sockets = controller_sockets()
    if not os.environ.get(ADDRESS_ENV) and any(sockets):
        try:
            addresses = controller_addresses()
        except ControllerUnavailable:  # sockets alone will do
            addresses = []
    else:
        addresses = controller_addresses()
    out: list[tuple[str, int] | str] = []
    for i in range(max(len(sockets), len(addresses))):
        if i < len(sockets) and sockets[i]:
            out.append(sockets[i])
        elif i < len(addresses):
            out.append(addresses[i])
    return out


def _connect(address: tuple[str, int] | str, timeout: float) -> _socket.socket:
    # _socket, not socket: ``socket`` brings enum and selectors (~7 ms of start-up)
    if isinstance(address, str):  # ctld's Unix socket ("@name": abstract)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect("\0" + address[1:] if address.startswith("@") else address)
            _check_server(sock, address)
        except (OSError, ControllerUnavailable):
            sock.close()
            raise
        return sock
    host, port = address
    # an ASCII host as bytes skips the idna codec import (~2.5 ms per command)
    host_arg: str | bytes = host.encode() if host.isascii() else host
    ca = os.environ.get(CA_ENV)
    if ca:  # TLS: ssl imports socket anyway
        import socket
        import ssl

        plain = socket.create_connection((host_arg, port), timeout=timeout)  # type: ignore[arg-type]
        return ssl.create_default_context(cafile=ca).wrap_socket(plain, server_hostname="ctld")
    return tcp_connect(host_arg, port, timeout)


def _check_server(sock: _socket.socket, address: str) -> None:
    """Send nothing to a socket served by anyone but root, this user or the controller's
    user: another user may have put it where ctld's was expected (a directory she made
    first, an env.sh gone stale), to collect scripts, environments and secrets. The
    kernel says who listens (SO_PEERCRED): one system call (docs/security.md)."""
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    uid = int.from_bytes(raw[4:8], sys.byteorder)  # struct ucred: pid, uid, gid
    if uid in (0, os.getuid()):
        return
    import pwd

    wanted = os.environ.get(CTLD_USER_ENV)
    if wanted is None:
        try:
            wanted = str(_config().get("controller", {}).get("user", ""))
        except ControllerUnavailable:
            wanted = ""
    try:
        trusted = int(wanted) if wanted.isdecimal() else pwd.getpwnam(wanted).pw_uid
    except KeyError:
        trusted = -1
    if uid == trusted:
        return
    try:
        who = f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        who = f"uid {uid}"
    raise ControllerUnavailable(
        f"refusing ctld's socket {address}: it is served by {who}, not by root, you or "
        f"the controller's user ({CTLD_USER_ENV} or controller.user: "
        f"{wanted or 'not set'}); another user may have put it there. Nothing was sent"
    )


def tcp_connect(host: str | bytes, port: int, timeout: float) -> _socket.socket:
    """socket.create_connection without the socket module: each address of ``host`` in
    turn; the last one's error when none answers."""
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = None
        try:
            sock = _socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                sock.close()
    raise error or OSError("getaddrinfo returns an empty list")


def where(address: tuple[str, int] | str) -> str:
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"


def _encode(request: Any) -> bytes:
    body = dumps(request).encode()
    if len(body) > MAX_REQUEST_BYTES:
        part, size = _largest_part(request)
        raise TooLarge(
            f"the request is too large: {len(body)} bytes (the largest part, {part}, is "
            f"{size} bytes); the controller accepts at most {MAX_REQUEST_BYTES} bytes"
        )
    return body


def _open(address: tuple[str, int] | str, timeout: float) -> _socket.socket:
    try:
        return _connect(address, timeout)
    except OSError as exc:
        raise ControllerUnavailable(
            f"Unable to contact slurm controller (connect failure) at "
            f"{where(address)}: {exc.strerror or exc}{ENV_HINT}"
        ) from None


def _exchange(
    sock: _socket.socket,
    address: tuple[str, int] | str,
    method: str,
    body: bytes,
    headers: list[tuple[str, str]],
) -> Any:
    host = "ctld" if isinstance(address, str) else address[0]
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    head = (
        f"POST /corral.v1.Controller/{method} HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{VERSION_KEY}: {__version__}\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    ).encode()
    try:
        try:
            sock.sendall(head + body)
            chunks = []
            while True:
                chunk = sock.recv(262144)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            sock.close()
    except OSError as exc:
        raise ControllerUnavailable(
            f"Unable to contact slurm controller (connect failure) at "
            f"{where(address)}: {exc.strerror or exc}{ENV_HINT}"
        ) from None
    return _parse_response(b"".join(chunks))


def post(
    address: tuple[str, int] | str,
    method: str,
    request: Any,
    headers: list[tuple[str, str]],
    timeout: float,
) -> Any:
    """One Controller call: the request as proto3 JSON on one short connection (TCP, or
    ctld's Unix socket when ``address`` is a path); the reply as parsed JSON, or the
    CorralError the gateway named."""
    body = _encode(request)
    return _exchange(_open(address, timeout), address, method, body, headers)


def post_any(
    targets: list[tuple[str, int] | str],
    method: str,
    request: Any,
    headers: Callable[[tuple[str, int] | str], list[tuple[str, str]]],
    timeout: float,
) -> tuple[Any, int]:
    """One call to whichever controller is primary: each in order, moving on from one
    that cannot be reached or answers NotPrimary (a standby), round after round until
    ``timeout`` (a takeover takes up to controller.lease_s). A request that reached a
    controller and then lost it is not sent again: it may have been done. Returns the
    reply and the index of the controller that answered."""
    body = _encode(request)
    if len(targets) == 1:
        return _exchange(
            _open(targets[0], timeout), targets[0], method, body, headers(targets[0])
        ), 0
    import time

    started = time.monotonic()
    deadline = started + timeout
    waiting = False
    while True:
        failures = []
        for i, target in enumerate(targets):
            try:
                sock = _open(target, min(timeout, 5.0))
            except ControllerUnavailable as exc:
                failures.append(str(exc).removesuffix(ENV_HINT))
                continue
            try:
                reply = _exchange(sock, target, method, body, headers(target))
            except NotPrimary as exc:
                failures.append(f"{where(target)}: {exc}")
                continue
            if waiting:
                notice(f"{where(target)} answered after {time.monotonic() - started:.1f} s")
            return reply, i
        left = deadline - time.monotonic()
        if left <= 0:
            raise ControllerUnavailable(
                "Unable to contact slurm controller (connect failure): no primary controller "
                f"answered within {timeout:g} s: " + "; ".join(failures)
            )
        if not waiting:  # never silent while it waits: a takeover takes seconds
            notice(
                "Unable to contact slurm controller: no primary answers ("
                + "; ".join(failures)
                + f"); retrying for up to {timeout:g} s ({TIMEOUT_ENV}), as a standby "
                "takes over within controller.lease_s"
            )
            waiting = True
        time.sleep(min(0.1, left))


def notice(message: str) -> None:
    """A line on stderr while a command waits for the controller (Slurm's commands say
    so too), under the command's name."""
    import sys

    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    prog = "corral" if not prog or prog.startswith("-") else prog  # python -c: no name
    sys.stderr.write(f"{prog}: {message}\n")
    sys.stderr.flush()


def _largest_part(request: Any) -> tuple[str, int]:
    """The biggest field of a request, two levels deep (to say what was too large)."""
    best = ("", 0)
    for key, value in request.items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        for name, item in items:
            size = len(dumps(item))
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
        payload: dict[str, Any] = loads(body) if body else {}
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
