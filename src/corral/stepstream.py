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
    sattach -> noded ATTACH   32-byte proof + JSON body (job, step, node, input ranks),
                    instead of START, for a step that runs: noded answers STARTED
                    (JSON {"ranks"}), then the step's recent and new output and exits;
                    sattach sends STDIN, then DONE to detach (the step goes on)
    srun -> noded   RESUME    32-byte proof + JSON body (job, step, node), instead of
                    START, once its stream broke (noded restarted and took the step
                    over): noded answers STARTED, then the output still in the tasks'
                    pipes and every exit srun has not had (srun keeps the first of each)

The first frame srun sends must be START, and nothing else is read before it is proven:
its proof is HMAC-SHA256 keyed by the step's credential (the secret ctld gives the
step's creator from CreateStep and the nodes from GetStep over mutual TLS) over this
connection's nonce and the whole body. So the credential never crosses the wire, a
recorded START is worthless on any other connection (replay), and no byte of the body
(environment, command's node, cwd) can be changed in flight.

After START, on a plaintext stream, every frame in both directions ends with a 16-byte
tag (``FrameMac``): HMAC-SHA256 under a key of this connection and direction (derived
from the credential and the nonce) over the frame's sequence number, kind and payload.
A frame injected, changed, replayed, reordered or dropped by a peer on the path fails
the next check, and the connection ends. noded's first answer to START is the one
exception: a REFUSED before STARTED carries no tag (noded may not know the credential
yet); all it can do is end the connection, which such a peer can do anyway. A TLS
stream (``tls.clients``) has TLS's own integrity and no tags. docs/security.md.
"""

from __future__ import annotations

import struct

from corral.cjson import dumps

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

MAGIC = b"corral-steps/2\n"  # 2: frames after START carry a tag
MAGIC_PREFIX = b"corral-steps/"
NONCE_BYTES = 32
PROOF_BYTES = 32
TAG_BYTES = 16  # HMAC-SHA256 truncated to 128 bits (RFC 2104's HMAC-SHA256-128)
HEADER = struct.Struct("!IB")  # length of kind + payload (+ tag), kind
SEQ_KIND = struct.Struct("!QB")  # what a tag covers before the payload
RANK = struct.Struct("!I")
EXIT_FIELDS = struct.Struct("!Iii")
SIGNAL_FIELD = struct.Struct("!i")
WINDOW_FIELDS = struct.Struct("!HH")
MAX_FRAME = 16 * 1024 * 1024  # corral.limits.NODED_MAX_RECEIVE_BYTES: what noded accepts
# START, the one frame noded reads before the proof: the environment (a job's may be
# 1 MiB: corral.limits.MAX_ENV_BYTES), JSON-escaped, and a few short fields
MAX_START = 2 * 1024 * 1024
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
ATTACH = 84  # "T": sattach's first frame (instead of START)
RESUME = 82  # "R": srun's first frame on a stream it reopens (instead of START)


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


def proof(credential: str, nonce: bytes, body: bytes | bytearray) -> bytes:
    """What START carries: the step credential proven for this connection and body."""
    return hmac_sha256(credential.encode(), b"corral-step-start\0" + nonce + body)


def attach_proof(credential: str, nonce: bytes, body: bytes) -> bytes:
    """What ATTACH carries (another domain than START's: neither passes for the other)."""
    return hmac_sha256(credential.encode(), b"corral-step-attach\0" + nonce + body)


def resume_proof(credential: str, nonce: bytes, body: bytes | bytearray) -> bytes:
    """What RESUME carries (its own domain: a START or ATTACH proof passes for neither)."""
    return hmac_sha256(credential.encode(), b"corral-step-resume\0" + nonce + body)


def resume_frame(credential: str, nonce: bytes, body: dict[str, object]) -> bytes:
    raw = dumps(body).encode()
    return frame(RESUME, resume_proof(credential, nonce, raw) + raw)


def attach_frame(credential: str, nonce: bytes, body: dict[str, object]) -> bytes:
    raw = dumps(body).encode()
    return frame(ATTACH, attach_proof(credential, nonce, raw) + raw)


def start_frame(credential: str, nonce: bytes, body: dict[str, object]) -> bytes:
    raw = dumps(body).encode()
    return frame(START, proof(credential, nonce, raw) + raw)


def session_keys(credential: str, nonce: bytes) -> tuple[bytes, bytes]:
    """This connection's tag keys: (srun -> noded, noded -> srun)."""
    secret = credential.encode()
    return (
        hmac_sha256(secret, b"corral-step-up\0" + nonce),
        hmac_sha256(secret, b"corral-step-down\0" + nonce),
    )


def _compare() -> Any:
    """A constant-time comparison without hmac (whose import loads OpenSSL)."""
    try:
        return __import__("_operator")._compare_digest
    except (ImportError, AttributeError):  # pragma: no cover
        import hmac

        return hmac.compare_digest


_equal = _compare()


class TamperedError(Exception):
    """A frame failed its tag: changed, injected, replayed or out of order."""


class FrameMac:
    """The tags of one direction of one connection. Frame ``n`` (from 0, the first after
    START) carries HMAC-SHA256(key, n, kind, payload)[:16]. HMAC's inner and outer
    states are made once and copied per frame. ``sha256`` is the hash's constructor:
    srun starts on the built-in one (no OpenSSL in its start-up) and, once a stream has
    carried ``FAST_AFTER`` bytes, moves to OpenSSL's, which is several times faster
    where the CPU has SHA instructions (the tags are the same)."""

    FAST_AFTER = 1 << 20

    def __init__(self, key: bytes, sha256: Any = None) -> None:
        self.key = key
        self.seq = 0
        self.fast = sha256 is not None
        self.carried = 0
        self._use(sha256 or _sha256)

    def _use(self, sha256: Any) -> None:
        padded = self.key.ljust(64, b"\0")
        self._inner = sha256(padded.translate(_IPAD))
        self._outer = sha256(padded.translate(_OPAD))

    def tag(self, kind: int, *parts: bytes | bytearray | memoryview) -> bytes:
        inner = self._inner.copy()
        inner.update(SEQ_KIND.pack(self.seq, kind))
        for part in parts:
            inner.update(part)
            self.carried += len(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        self.seq += 1
        if not self.fast and self.carried > self.FAST_AFTER:
            self.fast = True
            try:  # noqa: SIM105 (contextlib is one more import in srun's start-up)
                self._use(__import__("_hashlib").openssl_sha256)
            except (ImportError, AttributeError):  # pragma: no cover
                pass
        return bytes(outer.digest()[:TAG_BYTES])

    def seal(self, kind: int, *parts: bytes) -> bytes:
        """A whole frame of ``kind`` with ``parts`` as its payload, and its tag."""
        size = sum(len(p) for p in parts)
        return b"".join((HEADER.pack(size + 1 + TAG_BYTES, kind), *parts, self.tag(kind, *parts)))

    def open(self, kind: int, payload: bytearray) -> None:
        """Check the tag at the end of ``payload`` and cut it off (TamperedError)."""
        if len(payload) < TAG_BYTES:
            raise TamperedError(f"a frame of kind {kind} without its tag")
        with memoryview(payload) as view:
            expected = self.tag(kind, view[:-TAG_BYTES])
            good = _equal(expected, bytes(view[-TAG_BYTES:]))
        if not good:
            raise TamperedError(f"frame {self.seq - 1} (kind {kind}) failed its tag")
        del payload[-TAG_BYTES:]


def split_address(address: str) -> tuple[str, int, bool]:
    """(host, port, tls) of a stream address ``[tls://]host:port``."""
    tls = address.startswith(TLS_PREFIX)
    host, _, port = address.removeprefix(TLS_PREFIX).rpartition(":")
    if not host or not port.isdecimal():
        raise ValueError(f"not a task stream address: {address!r}")
    return host.strip("[]"), int(port), tls
