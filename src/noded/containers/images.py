"""Importing an image into the cache (cache.py): a squashfs file, an OCI image layout
directory, an OCI or docker archive, or a registry reference (refs.py).

A user's path is read by a process of the user's (``cat``/``tar``), streamed into a
staging copy of root's, then unpacked there by maintained tools: ``unsquashfs``,
``skopeo`` (archives, registries) and ``umoci`` (OCI layers, which checks every blob's
digest). Nothing the user can still change is unpacked or cached, and nothing of the
image is trusted: the unpacked tree is made safe (sanitize.py) before root reads a
file of it, and that read stays inside the image (beneath.py).

Every use of a cached image proves the user may have it, as her: her process opens
the file or the layout's files again (the stat keys remembered with the entry's key),
or the registry names that digest for that repository. A digest alone gives nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tarfile

from corral.config import ContainersConfig
from noded.containers import asuser, beneath, layouttar, ociconfig
from noded.containers.cache import Image, ImageCache, disk_full, entry_key
from noded.containers.errors import container_error
from noded.containers.refs import RegistryRef, is_path, parse_registry
from noded.containers.sanitize import sanitize
from noded.spawn import Identity

SQUASHFS_MAGIC = b"hsqs"
TAG = "corral-import"
PEEK_S = 30.0  # a stat or a registry inspect
IMPORT_TIMEOUT_S = 1800.0  # one import, a pull of a large image included
MAX_ENVIRONMENT = 1 << 20  # an /etc/environment larger than this is not read further

# sh run as the user: open the path (the user's own rights) and stat what was opened
_FMT = "%F|%d:%i:%s:%.9Y:%.9Z"
_STAT = f'exec <"$1" || exit 3; exec stat -L -c "{_FMT}" /proc/self/fd/0'
# an OCI layout's files, each opened by the user and stat'd on that descriptor
_LAYOUT_STAT = (
    'cd "$1" || exit 3; for f in index.json blobs/*/*; do exec 3<"$f" || exit 3; '
    f'printf "%s|" "$f"; stat -L -c "{_FMT}" /proc/self/fd/3 || exit 3; done'
)
# the copy: one open file, stat'd before and after it is read (to stderr), so the digest
# remembered for a stat key is the digest of exactly that file, unchanged meanwhile
_COPY = (
    f'exec <"$1" || exit 3; stat -L -c "{_FMT}" /proc/self/fd/0 >&2 || exit 3; '
    f'cat || exit 3; stat -L -c "{_FMT}" /proc/self/fd/0 >&2'
)


class Importer:
    def __init__(self, cache: ImageCache, settings: ContainersConfig) -> None:
        self.cache = cache
        self.settings = settings

    async def get(self, image: str, who: Identity, cwd: str) -> Image:
        """The cached image ``image`` names, imported first if need be."""
        try:
            if is_path(image):
                return await self._from_path(os.path.normpath(os.path.join(cwd, image)), who)
            return await self._from_registry(parse_registry(image), image)
        except OSError as exc:
            if disk_full(exc):
                raise container_error(
                    f"disk full importing {image} into {self.cache.root}"
                ) from None
            raise container_error(f"cannot import {image}: {exc.strerror or exc}") from None

    # ------------------------------------------------------------ paths

    async def _from_path(self, path: str, who: Identity) -> Image:
        res = await asuser.run(
            ["/bin/sh", "-c", _STAT, "corral-image", path],
            who=who,
            timeout_s=PEEK_S,
            what="read the image",
        )
        if res.rc != 0:
            reason = res.reason().rsplit(": ", 1)[-1]
            raise container_error(f"image {path}: {reason}")
        kind, _, stat_key = res.stdout.decode().strip().partition("|")
        if kind == "directory":
            self._allowed("oci-dir", path)
            return await self._from_layout_dir(path, who)
        if kind not in ("regular file", "regular empty file"):
            raise container_error(f"image {path}: not an image (a {kind})")
        key = self.cache.memo_get(stat_key)
        found = self.cache.lookup(key) if key else None
        if found is not None:
            return found
        with self.cache.staging() as stage:
            blob = os.path.join(stage, "blob")
            res = await self._copy_as_user(
                ["/bin/sh", "-c", _COPY, "corral-image", path], blob, who, path
            )
            seen = [ln.partition("|")[2] for ln in res.stderr.splitlines() if "|" in ln]
            digest = await asyncio.to_thread(_sha256_file, blob)
            with open(blob, "rb") as f:
                head = f.read(4)
            kind = "squashfs" if head == SQUASHFS_MAGIC else _archive_kind(blob, path)
            self._allowed("squashfs" if kind == "squashfs" else "archive", path)
            key = entry_key("file", digest)  # the file's own bytes: whoever has them may
            async with self.cache.locked(key):
                found = self.cache.lookup(key)
                if found is None:
                    if kind == "squashfs":
                        found = await self._unsquash(blob, stage, key, digest, path)
                    else:
                        layout = os.path.join(stage, "layout")
                        await self._skopeo(f"{kind}:{blob}", layout, path, local=True)
                        config = ociconfig.tag_layout(layout, TAG, path)
                        found = await self._unpack_layout(layout, stage, key, config, path)
            if len(seen) == 2 and seen[0] == seen[1]:  # the file did not change while read
                self.cache.memo_put(seen[0], key)
            return found

    async def _from_layout_dir(self, path: str, who: Identity) -> Image:
        # a cached image is found by the stat keys of the layout's files, each opened by
        # the user: only someone who can read exactly those files gets it from the cache
        listing = await self._layout_listing(path, who)
        key = self.cache.memo_get(listing)
        found = self.cache.lookup(key) if key else None
        if found is not None:
            return found
        with self.cache.staging() as stage:
            tar = os.path.join(stage, "layout.tar")
            await self._copy_as_user(["tar", "-C", path, "-cf", "-", "."], tar, who, path)
            layout = os.path.join(stage, "layout")
            await asyncio.to_thread(layouttar.extract, tar, layout, path)
            os.unlink(tar)
            config = ociconfig.tag_layout(layout, TAG, path)  # its manifest checked
            key = entry_key("layout", config.manifest)
            async with self.cache.locked(key):
                found = self.cache.lookup(key)
                if found is None:  # umoci checks every layer as it unpacks
                    found = await self._unpack_layout(layout, stage, key, config, path)
                else:  # the user's copy holds the whole image, not only its name
                    await asyncio.to_thread(ociconfig.check_layers, layout, config, path)
            if await self._layout_listing(path, who) == listing:  # unchanged while copied
                self.cache.memo_put(listing, key)
            return found

    async def _layout_listing(self, path: str, who: Identity) -> str:
        res = await asuser.run(
            ["/bin/sh", "-c", _LAYOUT_STAT, "corral-image", path],
            who=who,
            timeout_s=PEEK_S,
            what="read the image",
        )
        if res.rc != 0:
            raise container_error(f"image {path}: not an image (no readable OCI layout)")
        return "layout:" + hashlib.sha256(res.stdout).hexdigest()

    async def _copy_as_user(
        self, argv: list[str], dest: str, who: Identity, path: str
    ) -> asuser.Result:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            res = await asuser.run(
                argv,
                who=who,
                timeout_s=IMPORT_TIMEOUT_S,
                what="read the image",
                stdout=fd,
            )
        except TimeoutError:
            raise container_error(f"image {path}: reading it timed out") from None
        finally:
            os.close(fd)
        if res.rc != 0:
            if "No space left" in res.stderr:
                raise container_error(f"disk full importing {path} into {self.cache.root}")
            raise container_error(f"image {path}: {res.reason().rsplit(': ', 1)[-1]}")
        return res

    # ------------------------------------------------------------ registries

    async def _from_registry(self, ref: RegistryRef, image: str) -> Image:
        self._allowed("registry", image)
        if not self.settings.allow_registry_pulls:
            raise container_error(
                f"image {image}: registry pulls are not allowed on this node "
                "([containers] allow_registry_pulls)"
            )
        res = await self._tool(
            [*_skopeo(), "inspect", "--no-tags", "--format", "{{.Digest}}", ref.skopeo()],
            PEEK_S,
            image,
        )
        if res.rc != 0:
            why = res.reason().rsplit(": ", 1)[-1].strip('"')[:200]
            raise container_error(f"image {image}: registry unreachable or image unknown ({why})")
        digest = res.stdout.decode().strip()
        if ref.digest and digest != ref.digest:
            raise container_error(f"image {image}: digest mismatch (the registry has {digest})")
        # this registry's repository names this digest now (asked at every use)
        key = entry_key("registry", digest, f"{ref.registry}/{ref.image}")
        found = self.cache.lookup(key)
        if found is not None:
            return found
        async with self.cache.locked(key):
            found = self.cache.lookup(key)
            if found is not None:
                return found
            with self.cache.staging() as stage:
                layout = os.path.join(stage, "layout")
                pinned = RegistryRef(ref.registry, ref.image, "", digest)
                await self._skopeo(pinned.skopeo(), layout, image, local=False)
                config = ociconfig.tag_layout(layout, TAG, image)
                return await self._unpack_layout(layout, stage, key, config, image)

    # ------------------------------------------------------------ unpacking

    async def _unsquash(self, blob: str, stage: str, key: str, digest: str, source: str) -> Image:
        rootfs = os.path.join(stage, "rootfs")
        res = await self._tool(
            ["unsquashfs", "-no-xattrs", "-quiet", "-no-progress", "-d", rootfs, blob],
            IMPORT_TIMEOUT_S,
            source,
        )
        if res.rc != 0:
            self._raise_tool(res, source, "squashfs")
        os.unlink(blob)
        size = await asyncio.to_thread(sanitize, rootfs, source)
        env = await asyncio.to_thread(_enroot_env, rootfs)
        return self.cache.install(
            key, rootfs, size, digest=digest, source=source, env=env, entrypoint=[], workdir=""
        )

    async def _skopeo(self, src: str, layout: str, source: str, *, local: bool) -> None:
        argv = [*_skopeo(), "copy", "--quiet"]
        if local:  # a file the user gave: no registry signature policy applies
            argv.insert(1, "--insecure-policy")
        # what it unpacks on the way (an oci-archive's files) stays in root's staging
        tmp = os.path.join(os.path.dirname(layout), "tmp")
        os.mkdir(tmp, 0o700)
        res = await self._tool(
            [*argv, src, f"oci:{layout}:{TAG}"], IMPORT_TIMEOUT_S, source, {"TMPDIR": tmp}
        )
        if res.rc != 0:
            if not local:
                raise container_error(f"image {source}: registry unreachable ({res.reason()})")
            self._raise_tool(res, source, "OCI or docker archive")

    async def _unpack_layout(
        self, layout: str, stage: str, key: str, config: ociconfig.ImageConfig, source: str
    ) -> Image:
        rootfs = os.path.join(stage, "rootfs")
        res = await self._tool(
            ["umoci", "raw", "unpack", "--rootless", "--image", f"{layout}:{TAG}", rootfs],
            IMPORT_TIMEOUT_S,
            source,
        )
        if res.rc != 0:
            self._raise_tool(res, source, "OCI image")
        size = await asyncio.to_thread(sanitize, rootfs, source)
        return self.cache.install(
            key,
            rootfs,
            size,
            digest=config.manifest,
            source=source,
            env=config.env,
            entrypoint=config.entrypoint,
            workdir=config.workdir,
        )

    async def _tool(
        self, argv: list[str], timeout_s: float, source: str, env: dict[str, str] | None = None
    ) -> asuser.Result:
        base = {"PATH": asuser.SAFE_PATH, "LC_ALL": "C"}
        try:
            return await asuser.run(
                argv, who=None, timeout_s=timeout_s, what="import", env={**base, **(env or {})}
            )
        except TimeoutError:
            raise container_error(f"image {source}: {argv[0]} timed out") from None

    def _raise_tool(self, res: asuser.Result, source: str, what: str) -> None:
        text = res.stderr.lower()
        if "no space left" in text or "disk quota" in text:
            raise container_error(f"disk full importing {source} into {self.cache.root}")
        if "digest" in text and ("mismatch" in text or "verif" in text):
            raise container_error(f"image {source}: digest mismatch ({res.reason()})")
        raise container_error(f"image {source}: not an image (a bad {what}: {res.reason()})")

    def _allowed(self, kind: str, image: str) -> None:
        if kind not in self.settings.allowed_sources:
            raise container_error(
                f"image {image}: {kind} images are not allowed on this node "
                "([containers] allowed_sources)"
            )


def _skopeo() -> list[str]:
    """skopeo, with the registries file noded's environment names (the variable
    containers/image reads, which skopeo 1.9 ignores): an insecure or mirrored
    registry an operator configured for noded alone."""
    conf = os.environ.get("CONTAINERS_REGISTRIES_CONF", "")
    return ["skopeo", "--registries-conf", conf] if conf else ["skopeo"]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _archive_kind(blob: str, source: str) -> str:
    """docker-archive or oci-archive, by what the tar holds; ContainerError otherwise."""
    try:
        with tarfile.open(blob) as t:
            names = {n.lstrip("./") for n in t.getnames()}
    except (tarfile.TarError, OSError):
        names = set()
    if "manifest.json" in names:
        return "docker-archive"
    if "index.json" in names and "oci-layout" in names:
        return "oci-archive"
    raise container_error(
        f"image {source}: not an image (neither squashfs, nor an OCI or docker archive)"
    )


def _enroot_env(rootfs: str) -> list[str]:
    """An enroot squashfs keeps the image's env in /etc/environment (KEY=VALUE lines),
    read as the image resolves it: its /etc may be a link, never to the host's."""
    data = beneath.read_file(rootfs, "etc/environment", MAX_ENVIRONMENT)
    env: list[str] = []
    for line in (data or b"").decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if "=" in line and not line.startswith("#"):
            env.append(line.removeprefix("export ").replace('"', ""))
    return env
