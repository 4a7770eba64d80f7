"""A container's life on this node: prepared at a step's (or batch script's) start,
its tasks run in it through crun, torn down at the step's end, or the job's end for a
named one (--container-name).

One container is one root filesystem: the cached image (read-only, shared by every
job, bound where only the job's user reaches it: bindmount.py) under a fuse-overlayfs
mount the job's user makes, whose upper layer is the container's own. Every task of
the step on this node runs in that filesystem, with the same /tmp and /dev/shm; each
task is its own ``crun run`` (a rootless crun, as the user,
``--cgroup-manager=disabled``: the task stays in the job's cgroup, under its limits
and accounting, and carries the job's markers, so noded's signals, kills and usage
see it as any other task).

State, under noded's spool (root's)::

    <data_dir>/job_<id>/            root 0711 ([containers] data_dir)
        crun/                       the user's, 0700: crun's --root
        c_<name>/                   root's, 0755; in it the user's (0700): upper/ work/
                                    rootfs/ (the mount) tmp/; lower/ (0500) holding
                                    image/, root's read-only bind of the cached image;
                                    key (root's): that image's cache key
        b_<name>_<step>_<rank>/     root's, 0711: config.json of one task, the user's 0400
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from dataclasses import dataclass, field

import structlog

from corral.config import ContainersConfig
from corral.wire import corral_pb2 as pb
from noded.containers import asuser, bindmount, bundle, hostcheck, mounts, unmount
from noded.containers.cache import Image, ImageCache
from noded.containers.errors import ContainerError, container_error
from noded.containers.gpu import GpuEdits, edits_for
from noded.containers.images import IMPORT_TIMEOUT_S, Importer
from noded.gpu import GpuDevice
from noded.spawn import Identity

log = structlog.get_logger("noded")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
LOWER = "lower/image"  # in a container's directory: the image's read-only bind
KEY_FILE = "key"  # in a container's directory: its image's cache key (root's)
IMAGE_KEY = re.compile(r"^[flr]-[0-9a-f]{64}$")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MOUNT_S = 30.0


@dataclass
class Container:
    job_id: int
    name: str  # c_<name>: the user's --container-name, or "step<N>"
    named: bool
    directory: str
    image: Image
    who: Identity
    spec: pb.ContainerSpec
    mounts: list[mounts.Mount]
    steps: set[int] = field(default_factory=set)
    saves: dict[int, str] = field(default_factory=dict)  # step -> its --container-save

    @property
    def rootfs(self) -> str:
        return os.path.join(self.directory, "rootfs")


class Containers:
    """Every container on this node; the launch paths ask it for a task's argv."""

    def __init__(
        self,
        spool_dir: str,
        settings: ContainersConfig | None = None,
        *,
        gpu_devices: list[GpuDevice] | None = None,
    ) -> None:
        self.settings = settings or ContainersConfig()
        self.minors = {g.index: g.minor for g in gpu_devices or []}
        self.state = self.settings.data_path(spool_dir)
        self.spool_dir = spool_dir
        self._cache: ImageCache | None = None
        self.live: dict[tuple[int, str], Container] = {}
        self._kept: dict[int, list[str]] = {}  # job -> images its taken-over containers hold
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}

    @property
    def cache(self) -> ImageCache:
        if self._cache is None:  # made on first use: a node without containers has none
            self._cache = ImageCache(
                self.settings.cache_path(self.spool_dir), self.settings.cache_size_bytes
            )
        return self._cache

    def open_cache(self, kept: set[int]) -> None:
        """At start: a cache already here (an older noded's too) is made root's alone
        and brought to this version now, not when a container first asks for it. The
        containers of the jobs taken over (``kept``) hold their images, so none is
        evicted under them; an older noded's entries are kept aside (unreachable)
        while any such container may still read them."""
        path = self.settings.cache_path(self.spool_dir)
        if not os.path.isdir(path):
            return
        found = {job_id: _kept_keys(os.path.join(self.state, f"job_{job_id}")) for job_id in kept}
        running = any(os.path.isdir(os.path.join(self.state, f"job_{j}")) for j in kept)
        try:
            self._cache = ImageCache(path, self.settings.cache_size_bytes, keep_old=running)
        except OSError as exc:  # the node runs on; its first container says why again
            log.error("container image cache unusable", path=path, error=str(exc))
            return
        for job_id, keys in found.items():
            for key in keys:
                self._cache.hold(key)
            if keys:
                self._kept[job_id] = keys

    def missing(self) -> str:
        """Why containers cannot run here ("" when they can)."""
        return hostcheck.why_not(self.settings)

    # ------------------------------------------------------------ preparing

    async def prepare(
        self, job: pb.Job, spec: pb.ContainerSpec, who: Identity, *, step_id: int, cwd: str
    ) -> Container:
        """The container the step runs in: a named one of the job's if it has it, else
        made now (image imported first if need be). ContainerError says why not."""
        why = self.missing()
        if why:
            raise container_error(f"containers cannot run on this node: {why}")
        if spec.name and not NAME.match(spec.name):
            raise container_error(
                f"bad --container-name {spec.name!r}: letters, digits, '_', '.', '-' (64 at most)"
            )
        name = f"n_{spec.name}" if spec.name else f"step{step_id}" if step_id >= 0 else "batch"
        key = (job.job_id, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            ctr = self.live.get(key)
            if ctr is None and not spec.image:  # Pyxis: a name alone reuses the container
                raise container_error(
                    f"no container named {spec.name} in job {job.job_id} on this node "
                    "(the first step that names it needs --container-image)"
                )
            if ctr is None:
                ctr = await self._make(job, spec, who, name, cwd)
                self.live[key] = ctr
            ctr.steps.add(step_id)
            if spec.save:  # each step's own: a named container outlives the first's spec
                ctr.saves[step_id] = spec.save
            return ctr

    async def _make(
        self, job: pb.Job, spec: pb.ContainerSpec, who: Identity, name: str, cwd: str
    ) -> Container:
        image = await Importer(self.cache, self.settings).get(spec.image, who, cwd)
        # the config's default_mounts were checked when it was read; a reconfigure may
        # change them, so they are read here, per container
        defaults = mounts.parse(list(self.settings.default_mounts), cwd)
        wanted = [*defaults, *mounts.of_job(spec, cwd)]
        home = who.pw.pw_dir if who.pw is not None else os.environ.get("HOME", "")
        await mounts.check(wanted, who)
        # Pyxis mounts the home by default (a home the node lacks is left out)
        home_free = all(m.destination != home for m in wanted)
        if not spec.no_mount_home and home and os.path.isdir(home) and home_free:
            wanted.insert(0, mounts.Mount(home, home))
        self.cache.hold(image.key)
        directory = os.path.join(self._job_dir(job.job_id, who), f"c_{name}")
        try:
            _make_container_dir(directory, who, image.key)
            _bind_image(image, directory, who)
            await self._mount(directory, who)
        except BaseException:
            self.cache.release(image.key)
            _unmount_and_remove(directory)
            raise
        log.info("container made", job_id=job.job_id, name=name, image=spec.image)
        return Container(job.job_id, name, bool(spec.name), directory, image, who, spec, wanted)

    def _job_dir(self, job_id: int, who: Identity) -> str:
        os.makedirs(self.state, mode=0o711, exist_ok=True)
        path = os.path.join(self.state, f"job_{job_id}")
        if not os.path.isdir(path):
            os.mkdir(path, 0o711)
            _make_user_dir(os.path.join(path, "crun"), who)
        return path

    async def _mount(self, directory: str, who: Identity) -> None:
        # squash_to: every file of the image is the user's inside (as enroot's own
        # per-user copy would be); what they write lands in upper/, theirs on the host
        options = ",".join(
            [
                f"lowerdir={directory}/{LOWER}",
                f"upperdir={directory}/upper",
                f"workdir={directory}/work",
                f"squash_to_uid={who.uid}",
                f"squash_to_gid={who.gid}",
            ]
        )
        res = await asuser.run(
            ["fuse-overlayfs", "-o", options, os.path.join(directory, "rootfs")],
            who=who,
            timeout_s=MOUNT_S,
            what="mount the container",
            stdout=asyncio.subprocess.DEVNULL,
        )
        if res.rc != 0:
            raise container_error(f"cannot mount the container's filesystem: {res.reason()}")

    # ------------------------------------------------------------ a task

    def task_argv(
        self,
        ctr: Container,
        *,
        step_id: int,
        rank: int,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        gpu_indices: list[int],
        extra: list[mounts.Mount] | None = None,
    ) -> list[str]:
        """crun's argv that runs ``argv`` as task ``rank`` in the container (its
        config.json written now)."""
        spec, image = ctr.spec, ctr.image
        keep = set(spec.env)
        merged = dict(env)
        for item in image.env:
            k, _, v = item.partition("=")
            if k and k not in keep:
                merged[k] = v
        merged.setdefault("PATH", DEFAULT_PATH)
        minors = [self.minors.get(i, -1) for i in gpu_indices]
        gpu: GpuEdits = edits_for([m for m in minors if m >= 0], gpu_indices)
        for k, v in gpu.env.items():
            old = merged.get(k, "")
            merged[k] = f"{v}:{old}" if k == "LD_LIBRARY_PATH" and old else v
        args = list(argv)
        if image.entrypoint and spec.entrypoint:
            args = [*image.entrypoint, *args]
        if not args:
            raise container_error("nothing to run in the container")
        task = bundle.TaskSpec(
            rootfs=ctr.rootfs,
            tmp_dir=os.path.join(ctr.directory, "tmp"),
            uid=ctr.who.uid,
            gid=ctr.who.gid,
            remap_root=spec.remap_root,
            readonly=not spec.writable,
            args=args,
            env=merged,
            cwd=self._workdir(ctr, cwd),
            mounts=[*ctr.mounts, *(extra or [])],
            gpu=gpu,
        )
        bdir = os.path.join(os.path.dirname(ctr.directory), f"b_{ctr.name}_{step_id}_{rank}")
        _write_config(bdir, bundle.config(task), ctr.who)
        job_dir = os.path.dirname(ctr.directory)
        return [
            hostcheck.runtime_path(self.settings) or self.settings.runtime,
            "--root",
            os.path.join(job_dir, "crun"),
            "--cgroup-manager=disabled",
            "run",
            "--bundle",
            bdir,
            f"corral-{ctr.job_id}-{ctr.name}-{step_id}-{rank}",
        ]

    def _workdir(self, ctr: Container, cwd: str) -> str:
        """--container-workdir, else the job's directory where the container has it,
        else the image's WorkingDir, else /."""
        if ctr.spec.workdir:
            if not ctr.spec.workdir.startswith("/"):
                raise container_error(f"--container-workdir {ctr.spec.workdir}: not absolute")
            return ctr.spec.workdir
        if cwd and _exists_inside(cwd, ctr.image.rootfs, ctr.mounts):
            return cwd
        return ctr.image.workdir or "/"

    # ------------------------------------------------------------ the end

    async def step_done(self, job_id: int, step_id: int) -> None:
        """The step ended here: its --container-save, then its unnamed container goes."""
        for key, ctr in list(self.live.items()):
            if key[0] != job_id or step_id not in ctr.steps:
                continue
            ctr.steps.discard(step_id)
            _remove_bundles(os.path.dirname(ctr.directory), ctr.name, step_id)
            save = ctr.saves.pop(step_id, "")
            if save:
                await self._save(ctr, save)
            if not ctr.named:
                await self._remove(key)

    async def job_done(self, job_id: int) -> None:
        """The job ended here: every container of its goes, and its state directory."""
        for key in [k for k in self.live if k[0] == job_id]:
            await self._remove(key)
        for image_key in self._kept.pop(job_id, []):
            self.cache.release(image_key)
        path = os.path.join(self.state, f"job_{job_id}")
        if os.path.isdir(path):
            await asyncio.to_thread(unmount.unmount_job, self.state, f"job_{job_id}")
            if unmount.container_mounts(self.state, f"job_{job_id}"):
                log.error("container state still mounted: kept", job_id=job_id, path=path)
            else:
                _remove(path)

    async def _save(self, ctr: Container, path: str) -> None:
        """--container-save=PATH: the container's filesystem as squashfs, written by
        the user (a path they could not write stays unwritten)."""
        path = os.path.normpath(path)
        try:
            await asuser.checked(
                [
                    "mksquashfs",
                    ctr.rootfs,
                    path,
                    "-noappend",
                    "-quiet",
                    "-no-progress",
                    "-no-xattrs",
                ],
                who=ctr.who,
                timeout_s=IMPORT_TIMEOUT_S,
                what=f"save the container to {path}",
            )
        except ContainerError as exc:
            log.warning("container not saved", job_id=ctr.job_id, error=str(exc))
        else:
            log.info("container saved", job_id=ctr.job_id, name=ctr.name, path=path)

    async def _remove(self, key: tuple[int, str]) -> None:
        ctr = self.live.pop(key, None)
        self._locks.pop(key, None)
        if ctr is None:
            return
        await asyncio.to_thread(_unmount_and_remove, ctr.directory)
        self.cache.release(ctr.image.key)
        log.info("container removed", job_id=ctr.job_id, name=ctr.name)


# ---------------------------------------------------------------- helpers


def _make_user_dir(path: str, who: Identity) -> None:
    """A directory of the user's, made by root in a directory of root's (nothing there
    to follow)."""
    os.mkdir(path, 0o700)
    if who.pw is not None:
        os.chown(path, who.uid, who.gid)


def _make_container_dir(path: str, who: Identity, image_key: str) -> None:
    """The container's directory stays root's (its mount point cannot be swapped for a
    link: unmount.py); its layers, mount point and /tmp are the user's; lower/ is
    root's until the image is bound in it (_bind_image); ``key`` names the image's
    cache entry for a noded that takes the container over (open_cache)."""
    os.mkdir(path, 0o755)
    for sub in ("upper", "work", "rootfs", "tmp"):
        _make_user_dir(os.path.join(path, sub), who)
    os.mkdir(os.path.join(path, "lower"), 0o700)
    os.mkdir(os.path.join(path, LOWER), 0o755)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = os.open(os.path.join(path, KEY_FILE), flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(image_key)


def _kept_keys(job_dir: str) -> list[str]:
    """The image keys of the containers in ``job_dir`` (a job taken over)."""
    keys = []
    for entry in sorted(os.listdir(job_dir)) if os.path.isdir(job_dir) else []:
        if entry.startswith("c_"):
            try:
                with open(os.path.join(job_dir, entry, KEY_FILE), encoding="utf-8") as f:
                    key = f.read().strip()
            except OSError:
                continue  # an older noded's container: no key recorded
            if IMAGE_KEY.match(key):
                keys.append(key)
    return keys


def _bind_image(image: Image, directory: str, who: Identity) -> None:
    """The cached image, read-only at lower/image; then lower/ is the user's alone
    (0500): what her fuse-overlayfs shows in ps is a path only she can open."""
    bindmount.bind_readonly(image.rootfs, os.path.join(directory, LOWER))
    lower = os.path.join(directory, "lower")
    if who.pw is not None:
        os.chown(lower, who.uid, who.gid)
    os.chmod(lower, 0o500)


def _unmount_and_remove(directory: str) -> None:
    unmount.detach_container(directory)
    left = unmount.still_mounted(directory)
    if left:  # removing through the image's bind would remove the cached image
        log.error("container still mounted: its directory is kept", mounts=left)
        return
    _remove(directory)


def _write_config(bdir: str, config: dict[str, object], who: Identity) -> None:
    """config.json holds the task's environment: the user's alone (her crun reads it),
    in a directory of root's other users cannot list."""
    os.mkdir(bdir, 0o711)
    path = os.path.join(bdir, "config.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if who.pw is not None:
            os.fchown(f.fileno(), who.uid, who.gid)
        json.dump(config, f)


def _remove_bundles(job_dir: str, name: str, step_id: int) -> None:
    prefix = f"b_{name}_{step_id}_"
    for entry in os.listdir(job_dir):
        if entry.startswith(prefix):
            _remove(os.path.join(job_dir, entry))


def _remove(path: str) -> None:
    # rmtree walks by descriptors and never follows a link out (the user's dirs too)
    shutil.rmtree(path, ignore_errors=True)


def _exists_inside(path: str, image_rootfs: str, binds: list[mounts.Mount]) -> bool:
    """Whether directory ``path`` exists in the container: under a bind, in its source;
    else in the image, without following any link of the image's."""
    path = os.path.normpath(path)
    for m in sorted(binds, key=lambda b: len(b.destination), reverse=True):
        if path == m.destination or path.startswith(m.destination.rstrip("/") + "/"):
            return os.path.isdir(m.source + path[len(m.destination) :])
    current = image_rootfs
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        if os.path.islink(current) or not os.path.isdir(current):
            return False
    return True
