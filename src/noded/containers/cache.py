"""The per-node image cache: one read-only root filesystem per image digest.

Layout, all root's (the directories 0711, so a job's user reaches an image's files
only through the path noded gives crun, and lists nothing)::

    <cache>/images/<key>/rootfs     the unpacked image, root-owned, no setuid bits
    <cache>/images/<key>/meta.json  digest, size, source, the image's env/entrypoint
    <cache>/locks/<key>.lock        flock'd while <key> is imported: one import at a time
    <cache>/memo/<stat key>         a local file's digest, by (dev, inode, size, times)
    <cache>/staging/<random>/       an import in progress (removed whatever happens)

An entry is renamed into images/ only once complete, so a reader never sees half an
image. The size cap is kept by removing the least recently used entries (meta.json's
mtime, touched on each use) that no running container holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import structlog

from noded.containers.errors import container_error

log = structlog.get_logger("noded")

IMAGES, LOCKS, MEMO, STAGING = "images", "locks", "memo", "staging"


@dataclass(frozen=True)
class Image:
    """One cached image: its root filesystem and what its config says."""

    key: str
    rootfs: str
    digest: str
    size: int
    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    workdir: str = ""


def key_of(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise container_error(f"bad image digest {digest!r}")
    return f"sha256-{hexpart}"


@dataclass
class ImageCache:
    root: str
    cap_bytes: int
    in_use: dict[str, int] = field(default_factory=dict)  # key -> containers holding it

    def __post_init__(self) -> None:
        for sub in ("", IMAGES, LOCKS, MEMO, STAGING):
            path = os.path.join(self.root, sub)
            os.makedirs(path, mode=0o711, exist_ok=True)
            os.chmod(path, 0o700 if sub in (LOCKS, MEMO, STAGING) else 0o711)
        # an import a crash cut short leaves only staging: it is never an entry
        for name in os.listdir(os.path.join(self.root, STAGING)):
            shutil.rmtree(os.path.join(self.root, STAGING, name), ignore_errors=True)

    # ------------------------------------------------------------ lookups

    def lookup(self, digest: str) -> Image | None:
        key = key_of(digest)
        entry = os.path.join(self.root, IMAGES, key)
        try:
            with open(os.path.join(entry, "meta.json"), encoding="utf-8") as f:
                meta = json.load(f)
            os.utime(os.path.join(entry, "meta.json"))  # its last use, for LRU
        except (OSError, ValueError):
            return None
        return Image(
            key,
            os.path.join(entry, "rootfs"),
            meta["digest"],
            int(meta["size"]),
            tuple(meta.get("env", ())),
            tuple(meta.get("entrypoint", ())),
            str(meta.get("workdir", "")),
        )

    def memo_get(self, stat_key: str) -> str:
        try:
            with open(os.path.join(self.root, MEMO, _hash(stat_key)), encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return ""

    def memo_put(self, stat_key: str, digest: str) -> None:
        with contextlib.suppress(OSError):
            path = os.path.join(self.root, MEMO, _hash(stat_key))
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(digest)
            os.replace(path + ".tmp", path)

    # ------------------------------------------------------------ imports

    @contextlib.asynccontextmanager
    async def locked(self, digest: str) -> AsyncIterator[None]:
        """Held while ``digest`` is imported: a second import of it waits, then finds it."""
        fd = os.open(
            os.path.join(self.root, LOCKS, key_of(digest) + ".lock"),
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    @contextlib.contextmanager
    def staging(self) -> Iterator[str]:
        path = os.path.join(self.root, STAGING, secrets.token_hex(8))
        os.mkdir(path, 0o700)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def install(
        self,
        digest: str,
        staged_rootfs: str,
        *,
        source: str,
        env: list[str],
        entrypoint: list[str],
        workdir: str,
    ) -> Image:
        """Make ``staged_rootfs`` (root's own copy) the entry for ``digest``: owned by
        root, no setuid/setgid bits, no group/other write; then keep the size cap."""
        size = normalize(staged_rootfs)
        if size > self.cap_bytes:
            raise container_error(
                f"image {source} needs {size >> 20} MiB, more than the node's whole "
                f"image cache ({self.cap_bytes >> 20} MiB)"
            )
        key = key_of(digest)
        entry = os.path.join(os.path.dirname(staged_rootfs), "entry")
        os.mkdir(entry, 0o711)
        os.chmod(staged_rootfs, 0o755)
        os.rename(staged_rootfs, os.path.join(entry, "rootfs"))
        meta = {
            "digest": digest,
            "size": size,
            "source": source,
            "env": env,
            "entrypoint": entrypoint,
            "workdir": workdir,
            "imported": time.time(),
        }
        with open(os.path.join(entry, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        os.chmod(os.path.join(entry, "meta.json"), 0o644)
        final = os.path.join(self.root, IMAGES, key)
        if os.path.exists(final):  # imported meanwhile by a noded before a crash
            shutil.rmtree(final, ignore_errors=True)
        os.rename(entry, final)
        self.hold(key)
        try:
            self.evict()
        finally:
            self.release(key)
        image = self.lookup(digest)
        assert image is not None
        return image

    # ------------------------------------------------------------ the cap

    def hold(self, key: str) -> None:
        self.in_use[key] = self.in_use.get(key, 0) + 1

    def release(self, key: str) -> None:
        left = self.in_use.get(key, 0) - 1
        if left > 0:
            self.in_use[key] = left
        else:
            self.in_use.pop(key, None)

    def entries(self) -> list[tuple[float, int, str]]:
        """(last use, size, key) of every entry."""
        found = []
        base = os.path.join(self.root, IMAGES)
        for key in os.listdir(base):
            meta = os.path.join(base, key, "meta.json")
            try:
                with open(meta, encoding="utf-8") as f:
                    size = int(json.load(f)["size"])
                found.append((os.stat(meta).st_mtime, size, key))
            except (OSError, ValueError, KeyError):
                continue
        return found

    def evict(self) -> list[str]:
        """Remove least recently used entries no container holds until under the cap."""
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, key in entries:
            if total <= self.cap_bytes:
                break
            if key in self.in_use:
                continue
            doomed = os.path.join(self.root, STAGING, "evict-" + secrets.token_hex(6))
            try:
                os.rename(os.path.join(self.root, IMAGES, key), doomed)
            except OSError:
                continue
            shutil.rmtree(doomed, ignore_errors=True)
            total -= size
            removed.append(key)
            log.info("container image evicted", key=key, size_mb=size >> 20)
        return removed


def normalize(rootfs: str) -> int:
    """Root owns every file; setuid/setgid and group/other write bits go (a user's image
    never gives anyone a privilege on the host). Returns the bytes it takes on disk."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in [*dirnames, *filenames, ""]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            total += st.st_blocks * 512
            os.lchown(path, 0, 0)
            if not stat.S_ISLNK(st.st_mode):
                mode = stat.S_IMODE(st.st_mode) & ~0o6022
                if stat.S_ISDIR(st.st_mode):
                    mode |= 0o700
                os.chmod(path, mode)
    return total


def disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
