"""The per-node image cache: one read-only root filesystem per image.

Layout, all root's and root's alone (directories 0700, files 0600): a job's user
reaches an image only through the read-only bind noded makes in her container's
private directory (runtime.py), never through a path here::

    <cache>/VERSION                 the layout's version: another is emptied at start
    <cache>/images/<key>/rootfs     the unpacked image, made safe (sanitize.py)
    <cache>/images/<key>/meta.json  digest, size, source, the image's env/entrypoint
    <cache>/locks/<key>.lock        flock'd while <key> is imported: one import at a time
    <cache>/memo/<stat key hash>    the key a local file (or layout) was imported as
    <cache>/staging/<random>/       an import in progress (removed whatever happens)
    <cache>/staging/old-*/          an older noded's entries, removed at the first start
                                    that takes over no container that may read them

A key says what proved the image (entry_key): a file's own sha256, a layout's manifest
digest once every blob of it was checked, or a registry's manifest digest for that
registry and repository only. An entry is renamed into images/ only once complete, so
a reader never sees half an image. The size cap is kept by removing the least recently
used entries (meta.json's mtime, touched on each use) that no running container holds.
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
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import structlog

from noded.containers.errors import container_error

log = structlog.get_logger("noded")

IMAGES, LOCKS, MEMO, STAGING = "images", "locks", "memo", "staging"
VERSION = "corral image cache 2\n"  # 1 (no file): directories 0711, keys by digest alone
_KINDS = {"file": "f", "layout": "l", "registry": "r"}


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


def entry_key(kind: str, digest: str, scope: str = "") -> str:
    """The entry of an image of ``kind`` ("file", "layout" or "registry") with
    ``digest``; a registry's scoped to ``scope`` (registry/repository): another
    registry serving the same manifest proves nothing about having its layers."""
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise container_error(f"bad image digest {digest!r}")
    if kind == "registry":
        hexpart = _hash(f"{scope}@{digest}")
    return f"{_KINDS[kind]}-{hexpart}"


@dataclass
class ImageCache:
    root: str
    cap_bytes: int
    in_use: dict[str, int] = field(default_factory=dict)  # key -> containers holding it
    keep_old: bool = False  # containers taken over may read an older noded's entries

    def __post_init__(self) -> None:
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        _root_only(self.root, follow=True)  # first: nothing below is reachable now
        staging = os.path.join(self.root, STAGING)
        os.makedirs(staging, mode=0o700, exist_ok=True)
        _root_only(staging)
        old = _read(os.path.join(self.root, "VERSION")) != VERSION
        for sub in (IMAGES, LOCKS, MEMO):
            path = os.path.join(self.root, sub)
            if old and os.path.lexists(path):
                # an older noded's: its entries were made with less care (device nodes
                # kept, keys a user could name) and are imported again when asked for
                os.rename(path, os.path.join(staging, f"old-{sub}-{secrets.token_hex(4)}"))
                log.warning("container image cache of an older noded emptied", path=path)
            os.makedirs(path, mode=0o700, exist_ok=True)
            _root_only(path)
        # an import a crash cut short leaves only staging: it is never an entry
        for name in os.listdir(staging):
            if not (self.keep_old and name.startswith("old-")):
                shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
        if old:
            _write(os.path.join(self.root, "VERSION"), VERSION)

    # ------------------------------------------------------------ lookups

    def lookup(self, key: str) -> Image | None:
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
        """The entry key remembered for ``stat_key`` ("" when none)."""
        return _read(os.path.join(self.root, MEMO, _hash(stat_key))).strip()

    def memo_put(self, stat_key: str, key: str) -> None:
        with contextlib.suppress(OSError):
            _write(os.path.join(self.root, MEMO, _hash(stat_key)), key)

    # ------------------------------------------------------------ imports

    @contextlib.asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[None]:
        """Held while ``key`` is imported: a second import of it waits, then finds it."""
        fd = os.open(
            os.path.join(self.root, LOCKS, key + ".lock"),
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
        key: str,
        staged_rootfs: str,
        size: int,
        *,
        digest: str,
        source: str,
        env: list[str],
        entrypoint: list[str],
        workdir: str,
    ) -> Image:
        """Make ``staged_rootfs`` (root's own copy, made safe: sanitize.py, ``size``
        bytes) the entry ``key``; then keep the size cap."""
        if size > self.cap_bytes:
            raise container_error(
                f"image {source} needs {size >> 20} MiB, more than the node's whole "
                f"image cache ({self.cap_bytes >> 20} MiB)"
            )
        entry = os.path.join(os.path.dirname(staged_rootfs), "entry")
        os.mkdir(entry, 0o700)
        os.chmod(staged_rootfs, 0o755)  # the image's /, whatever mode its maker gave it
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
        _write(os.path.join(entry, "meta.json"), json.dumps(meta))
        final = os.path.join(self.root, IMAGES, key)
        if os.path.exists(final):  # imported meanwhile by a noded before a crash
            shutil.rmtree(final, ignore_errors=True)
        os.rename(entry, final)
        self.hold(key)
        try:
            self.evict()
        finally:
            self.release(key)
        image = self.lookup(key)
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


def _root_only(path: str, *, follow: bool = False) -> None:
    """The directory ``path`` (a link only where ``follow``: the cache_dir an admin
    named) is root's, 0700."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        os.chown(fd, os.geteuid(), os.getegid())  # root's (a noded run by a user: its own)
        os.chmod(fd, 0o700)
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    """``text`` into ``path`` at once (a reader sees the old file or the new), 0600."""
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
