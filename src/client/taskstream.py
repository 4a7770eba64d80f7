"""srun's side of the task stream (corral/stepstream.py): one socket per node.

Standard library only (no grpc, protobuf or asyncio: srun's start-up is its cost).
A ``NodeStream`` connects, reads noded's HELLO (the nonce), sends START with the step
credential's proof, and from then on is driven by srun's one selector loop: frames
are parsed from what arrived, what srun sends is buffered and written as the socket
takes it. On a plaintext stream every frame after START carries its tag both ways
(corral/stepstream.py ``FrameMac``); one that fails it ends this node's stream.
"""

from __future__ import annotations

import _socket
import os
import sys

from client.views.step import StepNode
from corral import stepstream as ss
from corral.errors import CorralError, NodeUnreachable
from corral.rest import tcp_connect

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from corral.wire import json_types as t

CA_ENV = "CORRAL_CTLD_CA"  # the cluster CA (corral.rest.CA_ENV): checks a TLS node's name
RECV_BYTES = 1 << 20


def _ssl_error() -> type[OSError]:
    import ssl  # only asked once ssl is loaded (a TLS stream)

    return ssl.SSLError


def _config_ca() -> str:
    """The cluster CA named by the config file (tls.dir/ca.crt), if this host has it."""
    from corral.rest import _config

    try:
        tls_dir = str(_config().get("tls", {}).get("dir", ""))
    except CorralError:
        return ""
    path = os.path.join(tls_dir, "ca.crt") if tls_dir else ""
    return path if path and os.access(path, os.R_OK) else ""


class NodeStream:
    def __init__(self, raw: t.StepNode, timeout: float) -> None:
        node = StepNode(raw)
        self.name = node.node
        self.ranks = [int(r) for r in node.ranks]
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.started = False
        self.done = False  # srun has every exit from here (DONE sent)
        self.closed = False
        self.up: ss.FrameMac | None = None  # tags of what srun sends (plaintext only)
        self.down: ss.FrameMac | None = None  # ... and of what noded sends
        self.proven = False  # noded's STARTED passed its tag: every frame has one now
        self.tampered = False
        self.would_block: tuple[type[BaseException], ...] = (BlockingIOError, InterruptedError)
        address = node.stream_address
        if not address:
            raise CorralError(f"{self.name}: its noded has no task stream (upgrade it)")
        try:
            host, port, self.tls = ss.split_address(address)
        except ValueError as exc:
            raise CorralError(f"{self.name}: {exc}") from None
        try:
            host_arg: Any = host.encode() if host.isascii() else host  # no idna import
            # _socket, not socket: ``socket`` brings enum and selectors (corral.rest)
            sock = self._tls_connect(host_arg, port, timeout) if self.tls else None
            if sock is None:
                sock = tcp_connect(host_arg, port, timeout)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            self.sock = sock
            kind, payload = self._read_frame()
        except OSError as exc:
            # nothing answers there: its noded is gone (srun: a node failure); a TLS
            # failure is not that (a certificate, a CA: the set-up)
            unreachable = not (sys.modules.get("ssl") and isinstance(exc, _ssl_error()))
            raise (NodeUnreachable if unreachable else CorralError)(
                f"{self.name}: cannot reach its task stream at {address}: {exc}"
            ) from None
        if kind != ss.HELLO or not payload.startswith(ss.MAGIC):
            self.sock.close()
            if kind == ss.HELLO and payload.startswith(ss.MAGIC_PREFIX):
                theirs = payload.split(b"\n", 1)[0].decode(errors="replace")
                raise CorralError(
                    f"{self.name}: its noded speaks {theirs}, this srun "
                    f"{ss.MAGIC.decode().strip()} (upgrade srun and noded together)"
                )
            raise CorralError(f"{self.name}: {address} does not speak the task stream")
        self.nonce = bytes(payload[len(ss.MAGIC) :])

    def _tls_connect(self, host: Any, port: int, timeout: float) -> _socket.socket:
        ca = os.environ.get(CA_ENV) or _config_ca()
        if not ca:
            raise CorralError(
                f"{self.name}: its task stream speaks TLS: set {CA_ENV} to the cluster's CA"
            )
        import socket  # ssl needs socket.socket (and imports socket anyway)
        import ssl

        plain = socket.create_connection((host, port), timeout=timeout)
        self.would_block = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
        return ssl.create_default_context(cafile=ca).wrap_socket(plain, server_hostname=self.name)

    def _read_frame(self) -> tuple[int, bytes]:
        """One whole frame, blocking (the hand-shake only)."""
        while True:
            got = self._parse_one()
            if got is not None:
                return got
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before it answered")
            self.rbuf += chunk

    def _parse_one(self) -> tuple[int, bytes] | None:
        buf = self.rbuf
        if len(buf) < ss.HEADER.size:
            return None
        length, kind = ss.HEADER.unpack_from(buf)
        end = 4 + length
        if len(buf) < end:
            return None
        payload = bytes(buf[ss.HEADER.size : end])
        del buf[:end]
        return kind, payload

    def start(self, credential: str, body: dict[str, Any]) -> None:
        frame = ss.start_frame(credential, self.nonce, body)
        if len(frame) - ss.HEADER.size > ss.MAX_START:  # noded would refuse it unread
            env = sum(len(k) + len(v) for k, v in body.get("environment", {}).items())
            raise CorralError(
                f"{self.name}: the step's start is {len(frame) - ss.HEADER.size} bytes, "
                f"more than noded reads before its proof ({ss.MAX_START} bytes); the "
                f"environment is {env} bytes: export fewer variables (--export)"
            )
        self.sock.sendall(frame)
        if not self.tls:
            up, down = ss.session_keys(credential, self.nonce)
            self.up, self.down = ss.FrameMac(up), ss.FrameMac(down)
        self.sock.setblocking(False)

    def resume(self, credential: str, body: dict[str, Any]) -> None:
        """RESUME instead of START: the step runs there, its stream broke."""
        self.sock.sendall(ss.resume_frame(credential, self.nonce, body))
        if not self.tls:
            up, down = ss.session_keys(credential, self.nonce)
            self.up, self.down = ss.FrameMac(up), ss.FrameMac(down)
        self.sock.setblocking(False)

    def attach(self, credential: str, body: dict[str, Any]) -> None:
        """sattach: ATTACH instead of START (the step runs already)."""
        self.sock.sendall(ss.attach_frame(credential, self.nonce, body))
        if not self.tls:
            up, down = ss.session_keys(credential, self.nonce)
            self.up, self.down = ss.FrameMac(up), ss.FrameMac(down)
        self.sock.setblocking(False)

    def await_started(self, timeout: float | None = None) -> tuple[int, bytes]:
        """Block for the first answer to START: STARTED, or REFUSED with the reason."""
        self.sock.settimeout(timeout)
        try:
            kind, payload = self._read_frame()
        finally:
            self.sock.setblocking(False)
        kind, checked = self._checked(kind, bytearray(payload))
        return kind, bytes(checked)

    def _checked(self, kind: int, payload: bytearray) -> tuple[int, bytearray]:
        """A frame as received, its tag checked and cut off; a frame that fails becomes
        a REFUSED saying so (and nothing more is taken from this stream)."""
        if self.down is None or self.tampered:
            return kind, payload
        if kind == ss.REFUSED and not self.proven:
            return kind, payload  # noded's first answer may be an untagged refusal
        try:
            self.down.open(kind, payload)
        except ss.TamperedError as exc:
            self.tampered = True
            why = f"its task stream was tampered with on the way ({exc})"
            return ss.REFUSED, bytearray(why.encode())
        if kind == ss.STARTED:
            self.proven = True
        return kind, payload

    # ------------------------------------------------------------ the loop's side

    def receive(self) -> bool:
        """Read what is there; False once noded closed the stream."""
        try:
            chunk = self.sock.recv(RECV_BYTES)
            while chunk:
                self.rbuf += chunk
                if not (hasattr(self.sock, "pending") and self.sock.pending()):
                    break
                chunk = self.sock.recv(RECV_BYTES)  # TLS: what its buffer still holds
        except self.would_block:
            return True
        except OSError:
            return False
        return bool(chunk)

    def frames(self) -> Iterator[tuple[int, bytearray]]:
        """Whole frames received so far, in order (consumed as they are yielded)."""
        buf, pos, size = self.rbuf, 0, len(self.rbuf)
        try:
            while size - pos >= ss.HEADER.size and not self.tampered:
                length, kind = ss.HEADER.unpack_from(buf, pos)
                end = pos + 4 + length
                if end > size:
                    break
                payload = buf[pos + ss.HEADER.size : end]
                pos = end
                yield self._checked(kind, payload)
        finally:
            del buf[: size if self.tampered else pos]

    def send(self, kind: int, payload: bytes = b"") -> None:
        if not self.closed:
            self.wbuf += ss.frame(kind, payload) if self.up is None else self.up.seal(kind, payload)
            self.flush()

    def flush(self) -> bool:
        """Write what the socket takes now; False if the connection broke."""
        while self.wbuf:
            try:
                sent = self.sock.send(self.wbuf)
            except self.would_block:
                return True
            except OSError:
                self.wbuf.clear()
                return False
            del self.wbuf[:sent]
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.wbuf.clear()
            self.sock.close()
