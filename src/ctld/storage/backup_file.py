"""A store backup's file: a header that says what it holds, then the payload.

    corral-backup 1\\n                  the format (a first line ``file`` and ``head`` show)
    {"backend": ..., "revision": ...}\\n  the header, JSON, NUL-padded to HEADER_BYTES
    payload                             a SQLite database file, or pg_dump's SQL

The header carries the store's schema revision, the corral version that wrote it, the
payload's size and SHA-256, so a restore checks all of it before it changes anything.

Writing: a private temporary file beside the destination (mkstemp: O_EXCL, mode 0600),
fsynced, then renamed over the destination: a reader never sees half a backup, the
previous one stays whole until the new one is, and a symlink (or any file) planted at
the destination is replaced, never written through. Reading: the file itself, never a
symlink, and only one that is the caller's or root's and that no one else may write (a
backup is the whole store: whoever could edit it could decide what jobs run as whom).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any, Protocol

from corral.errors import StoreError

MAGIC = b"corral-backup 1\n"
HEADER_BYTES = 4096
CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Header:
    backend: str  # "sqlite" or "postgresql"
    revision: str  # the store's schema revision (ctld.storage.migrate)
    corral_version: str
    taken_at: float  # seconds since the epoch
    source: str  # the store it was taken from (its URL, without a password)
    schema: str = ""  # PostgreSQL: the schema the store's tables are in
    payload_bytes: int = 0
    payload_sha256: str = ""

    def encode(self) -> bytes:
        text = MAGIC + json.dumps(dataclasses.asdict(self), sort_keys=True).encode() + b"\n"
        if len(text) > HEADER_BYTES:
            raise StoreError("the backup's header is too long (a store URL of 4 KiB?)")
        return text.ljust(HEADER_BYTES, b"\0")

    @classmethod
    def decode(cls, block: bytes, path: str) -> Header:
        if not block.startswith(MAGIC):
            raise StoreError(f"{path}: not a corral backup (no '{MAGIC.decode().strip()}' line)")
        try:
            fields: Any = json.loads(block[len(MAGIC) :].rstrip(b"\0"))
            # fields a newer corral added are left out: its revision is what refuses it
            known = {f.name for f in dataclasses.fields(cls)}
            header = cls(**{k: v for k, v in fields.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            raise StoreError(f"{path}: the backup's header is damaged: {exc}") from None
        for name, kind in (
            ("backend", str),
            ("revision", str),
            ("corral_version", str),
            ("source", str),
            ("schema", str),
            ("payload_sha256", str),
            ("payload_bytes", int),
            ("taken_at", (int, float)),
        ):
            if not isinstance(getattr(header, name), kind):
                raise StoreError(f"{path}: the backup's header has a bad {name}")
        return header


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class _Hashing:
    """A write-only stream that counts and hashes what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)


def write(dest: str, header: Header, payload: Callable[[Sink], None]) -> Header:
    """Write a backup to ``dest`` (atomically, 0600): ``payload`` writes the payload
    into the stream it is given. Returns the header as written (size and hash filled)."""
    directory = os.path.dirname(os.path.abspath(dest)) or "/"
    if os.path.isdir(dest):
        raise StoreError(f"{dest}: is a directory; name the backup file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", dir=directory)
    except OSError as exc:
        raise StoreError(f"{dest}: cannot write there: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(b"\0" * HEADER_BYTES)  # the header is written last, over this
            stream = _Hashing(out)
            payload(stream)
            done = dataclasses.replace(
                header, payload_bytes=stream.size, payload_sha256=stream.sha.hexdigest()
            )
            out.seek(0)
            out.write(done.encode())
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_dir(directory)
    return done


def sync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_trusted(path: str) -> Iterator[tuple[Header, IO[bytes]]]:
    """The backup at ``path``, checked whole (its owner, its mode, its size and hash):
    its header, and the file positioned at its payload."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if os.path.islink(path):
            raise StoreError(f"{path}: is a symbolic link: name the backup file itself") from None
        raise StoreError(f"{path}: cannot read it: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{path}: not a regular file")
        me = os.geteuid()
        if st.st_uid not in (me, 0):
            raise StoreError(
                f"{path}: owned by uid {st.st_uid}, not by you (uid {me}) or root: a backup "
                "is the whole store, and its owner could have changed any job in it"
            )
        if st.st_mode & 0o022:
            raise StoreError(
                f"{path}: mode {stat.S_IMODE(st.st_mode):04o}: others may write it, so it "
                "cannot be trusted (backups are written 0600)"
            )
        header = Header.decode(f.read(HEADER_BYTES), path)
        if st.st_size != HEADER_BYTES + header.payload_bytes:
            raise StoreError(
                f"{path}: {st.st_size} bytes, but its header promises "
                f"{HEADER_BYTES + header.payload_bytes}: the file is truncated or damaged"
            )
        sha = hashlib.sha256()
        for chunk in iter(lambda: f.read(CHUNK), b""):
            sha.update(chunk)
        if sha.hexdigest() != header.payload_sha256:
            raise StoreError(f"{path}: its content does not match its checksum: it is damaged")
        f.seek(HEADER_BYTES)
        yield header, f


def copy_payload(f: IO[bytes], out: Sink) -> None:
    for chunk in iter(lambda: f.read(CHUNK), b""):
        out.write(chunk)
