"""The HTTP/JSON transport to ctld's gateway, standard library only.

corral.api's HttpController (the typed client the short-lived commands use) sends
through this instead of gRPC: ``import grpc`` alone costs more than the whole budget
of a command. The messages are the proto's own, in proto3's JSON mapping (camelCase keys, enums as
names, 64-bit integers as strings), posted to ``/corral.v1.Controller/<Method>``.
"""

from __future__ import annotations

import json
import os
import socket

from corral.errors import ControllerUnavailable, CorralError, from_wire

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

ADDRESS_ENV = "CORRAL_CTLD_HTTP"
TIMEOUT_ENV = "CORRAL_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0


# what a user who started a cluster with `corral up` and opened a new shell needs
ENV_HINT = " (for a cluster started by `corral up`: source STATE_DIR/env.sh)"


def controller_address() -> tuple[str, int]:
    """host and port of ctld's HTTP gateway: $CORRAL_CTLD_HTTP, else the config file."""
    value = os.environ.get(ADDRESS_ENV)
    if not value:
        import tomllib

        from corral.config import config_path  # only when no env.sh was sourced

        path = config_path()
        try:
            with open(path, "rb") as fh:
                ctl = tomllib.load(fh).get("controller", {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ControllerUnavailable(
                f"cannot find the controller: set {ADDRESS_ENV} or CORRAL_CONF ({path}: {exc})"
                f"{ENV_HINT}"
            ) from None
        from corral.config import DEFAULT_HTTP_PORT

        return str(ctl.get("host", "127.0.0.1")), int(ctl.get("http_port", DEFAULT_HTTP_PORT))
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ControllerUnavailable(f"{ADDRESS_ENV}={value!r} is not host:port")
    return host.strip("[]"), int(port)


def post(
    address: tuple[str, int],
    method: str,
    request: Any,
    headers: list[tuple[str, str]],
    timeout: float,
) -> Any:
    """One Controller call: the request as proto3 JSON on one short connection; the
    reply as parsed JSON, or the CorralError the gateway named."""
    body = json.dumps(request, separators=(",", ":")).encode()
    host = address[0]
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    head = (
        f"POST /corral.v1.Controller/{method} HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    ).encode()
    try:
        # an ASCII host as bytes skips the idna codec import (~2.5 ms per command)
        host_arg: str | bytes = host.encode() if host.isascii() else host
        with socket.create_connection((host_arg, address[1]), timeout=timeout) as sock:  # type: ignore[arg-type]
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
            f"{address[0]}:{address[1]}: {exc.strerror or exc}{ENV_HINT}"
        ) from None
    return _parse_response(b"".join(chunks))


def _parse_response(raw: bytes) -> dict[str, Any]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ControllerUnavailable("the controller closed the connection without an answer")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise CorralError(f"the controller sent a malformed answer: {lines[0]!r}")
    status = int(parts[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    try:
        payload: dict[str, Any] = json.loads(body) if body else {}
    except ValueError:
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
