"""srun's task stream: the framed protocol between srun and noded, standard library only.

One TCP connection per node of a step (TLS when the cluster has ``tls.clients``). Every
frame is a 4-byte big-endian length (of what follows it), a 1-byte kind and a payload:

    noded -> srun   HELLO     b"corral-steps/1\\n" + 32-byte nonce (sent on accept)
                    STARTED   JSON {"masterPort", "pids"}
                    STDOUT, STDERR   4-byte rank + the bytes
                    EXIT      rank, exit code, signal (3 x 4 bytes)
                    REFUSED   why, UTF-8 (then noded closes)
    srun -> noded   START     32-byte proof + JSON body (job, step, node, environment...)
                    STDIN, STDIN_EOF, SIGNAL (4 bytes), WINDOW (rows, cols), DONE

The first frame srun sends must be START, and nothing else is read before it is proven:
its proof is HMAC-SHA256 keyed by the step's credential (the secret ctld gives the
step's creator from CreateStep and the nodes from GetStep over mutual TLS) over this
connection's nonce and the whole body. So the credential never crosses the wire, a
recorded START is worthless on any other connection (replay), and no byte of the body
(environment, command's node, cwd) can be changed in flight. docs/security.md.
"""

from __future__ import annotations

import json
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _builtin_sha256() -> Any:
    """The built-in SHA-256 (no OpenSSL: importing _hashlib costs srun ~3-20 ms here):
    ``_sha256`` up to Python 3.11, ``_sha2`` after."""
    for name in ("_sha256", "_sha2"):
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            continue
    return None  # pragma: no cover


_sha256 = _builtin_sha256()

MAGIC = b"corral-steps/1\n"
NONCE_BYTES = 32
PROOF_BYTES = 32
HEADER = struct.Struct("!IB")  # length of kind + payload, kind
RANK = struct.Struct("!I")
EXIT_FIELDS = struct.Struct("!Iii")
SIGNAL_FIELD = struct.Struct("!i")
WINDOW_FIELDS = struct.Struct("!HH")
MAX_FRAME = 16 * 1024 * 1024  # corral.limits.NODED_MAX_RECEIVE_BYTES: what noded accepts
TLS_PREFIX = "tls://"

# noded -> srun
HELLO = 72  # "H"
STARTED = 83  # "S"
STDOUT = 79  # "O"
STDERR = 69  # "E"
EXIT = 88  # "X"
REFUSED = 70  # "F"
# srun -> noded
START = 65  # "A"
STDIN = 73  # "I"
STDIN_EOF = 90  # "Z"
SIGNAL = 75  # "K"
WINDOW = 87  # "W"
DONE = 68  # "D": srun has every exit from this node (gRPC's half-close)


def frame(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload) + 1, kind) + payload


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, msg: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104), equal to ``hmac.digest(key, msg, "sha256")`` (a unit test
    holds it so), on the built-in SHA-256."""
    if _sha256 is None:  # pragma: no cover
        import hmac

        return hmac.digest(key, msg, "sha256")
    if len(key) > 64:
        key = _sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = _sha256(key.translate(_IPAD) + msg).digest()
    return bytes(_sha256(key.translate(_OPAD) + inner).digest())


def proof(credential: str, nonce: bytes, body: bytes) -> bytes:
    """What START carries: the step credential proven for this connection and body."""
    return hmac_sha256(credential.encode(), b"corral-step-start\0" + nonce + body)


def start_frame(credential: str, nonce: bytes, body: dict[str, object]) -> bytes:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return frame(START, proof(credential, nonce, raw) + raw)


def split_address(address: str) -> tuple[str, int, bool]:
    """(host, port, tls) of a stream address ``[tls://]host:port``."""
    tls = address.startswith(TLS_PREFIX)
    host, _, port = address.removeprefix(TLS_PREFIX).rpartition(":")
    if not host or not port.isdecimal():
        raise ValueError(f"not a task stream address: {address!r}")
    return host.strip("[]"), int(port), tls
