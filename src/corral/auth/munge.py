"""MUNGE credentials through libmunge (ctypes): what Slurm's auth/munge does.

A credential is made by the local munged, which puts the caller's uid and gid in it
(the kernel tells munged who asks); any host sharing the key decodes it. munged
refuses a credential older than its TTL and one decoded twice (its replay cache);
``Verifier`` adds our own TTL bound and replay cache, so a credential captured off
the wire is good for one request only even behind several munged.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict

from corral.errors import PermissionDenied, Unauthenticated

_OPT_TTL = 4
_OPT_ENCODE_TIME = 6
_OPT_SOCKET = 8
_EMUNGE_SUCCESS = 0
MAX_CRED_CHARS = 8192


_lib: ctypes.CDLL | None = None


def _libmunge() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libmunge.so.2")
        except OSError as exc:
            raise Unauthenticated(f"libmunge is not installed: {exc}") from None
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_destroy.restype = None
        lib.munge_strerror.restype = ctypes.c_char_p
        lib.munge_strerror.argtypes = [ctypes.c_int]
        lib.munge_ctx_strerror.restype = ctypes.c_char_p
        lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
        lib.munge_encode.argtypes = [
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        lib.munge_decode.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
        ]
        _lib = lib
    return _lib


def check_library() -> None:
    """Unauthenticated when libmunge cannot be loaded here (the munge package)."""
    _libmunge()


def _libc_free(ptr: int) -> None:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(ptr)


class _Context:
    def __init__(self, socket: str) -> None:
        self.lib = _libmunge()
        self.ctx = self.lib.munge_ctx_create()
        if not self.ctx:
            raise Unauthenticated("munge_ctx_create failed")
        if socket:
            self._set(_OPT_SOCKET, ctypes.c_char_p(socket.encode()))

    def _set(self, opt: int, value: object) -> None:
        rc = self.lib.munge_ctx_set(ctypes.c_void_p(self.ctx), ctypes.c_int(opt), value)
        if rc != _EMUNGE_SUCCESS:
            raise Unauthenticated(f"munge: {self.error(rc)}")

    def error(self, rc: int) -> str:
        text = self.lib.munge_ctx_strerror(self.ctx) or self.lib.munge_strerror(rc)
        return bytes(text).decode(errors="replace")

    def encode_time(self) -> int:
        value = ctypes.c_long(0)
        self.lib.munge_ctx_get(
            ctypes.c_void_p(self.ctx), ctypes.c_int(_OPT_ENCODE_TIME), ctypes.byref(value)
        )
        return int(value.value)

    def close(self) -> None:
        if self.ctx:
            self.lib.munge_ctx_destroy(self.ctx)
            self.ctx = 0


def encode(payload: bytes = b"", socket: str = "") -> str:
    """A credential for this process's uid/gid, carrying ``payload``."""
    ctx = _Context(socket)
    try:
        cred = ctypes.c_char_p()
        rc = ctx.lib.munge_encode(ctypes.byref(cred), ctx.ctx, payload, len(payload))
        if rc != _EMUNGE_SUCCESS:
            raise Unauthenticated(f"munge: cannot make a credential: {ctx.error(rc)}")
        text = bytes(cred.value or b"").decode()
        _libc_free(ctypes.cast(cred, ctypes.c_void_p).value or 0)
        return text
    finally:
        ctx.close()


def decode(cred: str, socket: str = "") -> tuple[int, int, bytes, int]:
    """(uid, gid, payload, encode time) of a valid credential; PermissionDenied if not."""
    if len(cred) > MAX_CRED_CHARS or not cred.isascii():
        raise PermissionDenied("Access/permission denied: malformed munge credential")
    ctx = _Context(socket)
    try:
        buf = ctypes.c_void_p()
        length = ctypes.c_int(0)
        uid = ctypes.c_uint32(0)
        gid = ctypes.c_uint32(0)
        rc = ctx.lib.munge_decode(
            cred.encode(),
            ctx.ctx,
            ctypes.byref(buf),
            ctypes.byref(length),
            ctypes.byref(uid),
            ctypes.byref(gid),
        )
        payload = ctypes.string_at(buf.value, length.value) if buf.value else b""
        if buf.value:
            _libc_free(buf.value)
        if rc != _EMUNGE_SUCCESS:
            raise PermissionDenied(f"Access/permission denied: munge: {ctx.error(rc)}")
        return int(uid.value), int(gid.value), payload, ctx.encode_time()
    finally:
        ctx.close()


class Verifier:
    """Decodes credentials, each accepted once and only within ``ttl_s`` of its making."""

    def __init__(self, socket: str = "", ttl_s: float = 300.0) -> None:
        self.socket = socket
        self.ttl_s = ttl_s
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, cred: str, payload: bytes, now: float | None = None) -> tuple[int, int]:
        uid, gid, got, made = decode(cred, self.socket)
        now = time.time() if now is None else now
        if made and abs(now - made) > self.ttl_s:
            raise PermissionDenied("Access/permission denied: munge credential expired")
        if got != payload:
            raise PermissionDenied("Access/permission denied: munge credential for another call")
        with self._lock:
            while self._seen and next(iter(self._seen.values())) < now - self.ttl_s:
                self._seen.popitem(last=False)
            if cred in self._seen:
                raise PermissionDenied("Access/permission denied: munge credential replayed")
            self._seen[cred] = now
        return uid, gid
