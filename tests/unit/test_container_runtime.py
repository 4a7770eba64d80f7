"""noded/containers' pure parts and its image cache on a real file system."""

from __future__ import annotations

import asyncio
import os
import pathlib
import pwd
import shutil

import pytest

from corral.config import ContainersConfig
from noded.containers import bundle, mounts
from noded.containers.cache import ImageCache, key_of
from noded.containers.errors import ContainerError
from noded.containers.refs import is_path, parse_registry
from noded.containers.runtime import _exists_inside
from noded.spawn import Identity

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the cache chowns to root")


def test_enroot_references_parse_as_enroot_reads_them() -> None:
    ref = parse_registry("nvcr.io#nvidia/pytorch:24.05-py3")
    assert ref.skopeo() == "docker://nvcr.io/nvidia/pytorch:24.05-py3"
    assert parse_registry("ubuntu").skopeo() == "docker://docker.io/library/ubuntu:latest"
    ref = parse_registry("me@registry.local:5000#team/img:v1")
    assert (ref.user, ref.registry, ref.image, ref.tag) == (
        "me",
        "registry.local:5000",
        "team/img",
        "v1",
    )
    pinned = parse_registry("alpine@sha256:" + "a" * 64)
    assert pinned.skopeo() == "docker://docker.io/library/alpine@sha256:" + "a" * 64
    for bad in ("UPPER/case", "img:bad tag", "reg istry#img", "img@sha256:xyz"):
        with pytest.raises(ContainerError):
            parse_registry(bad)
    assert is_path("/a/b.sqsh") and is_path("./x") and not is_path("ubuntu:22.04")


def test_mounts_are_checked_again_on_the_node() -> None:
    got = mounts.parse(["/data:/in:ro+nosuid", "/scratch", "tmpfs:/fast"], "/home/a")
    assert got[0] == mounts.Mount("/data", "/in", readonly=True)
    assert got[1] == mounts.Mount("/scratch", "/scratch")
    assert got[2].oci()["type"] == "tmpfs"
    assert "nosuid" in got[0].oci()["options"] and "ro" in got[0].oci()["options"]  # type: ignore[operator]
    for bad in ("/a:relative", "/a:/b/../etc", "/a:/b:suid", "/a:/proc", "/a:/", "rel:/x"):
        with pytest.raises(ContainerError):
            mounts.parse([bad], "")


def test_the_config_maps_one_id_and_grants_no_privilege() -> None:
    task = bundle.TaskSpec(
        rootfs="/r",
        tmp_dir="/t",
        uid=1234,
        gid=99,
        remap_root=False,
        readonly=True,
        args=["true"],
        env={"A": "1"},
        cwd="/w",
    )
    cfg = bundle.config(task)
    proc = cfg["process"]
    assert isinstance(proc, dict) and proc["user"] == {"uid": 1234, "gid": 99}
    assert proc["noNewPrivileges"] is True and proc["capabilities"]["bounding"] == []
    linux = cfg["linux"]
    assert isinstance(linux, dict)
    assert linux["uidMappings"] == [{"containerID": 1234, "hostID": 1234, "size": 1}]
    assert {"type": "network"} not in linux["namespaces"]  # host networking (NCCL)
    assert {"type": "pid"} not in linux["namespaces"]  # noded's signals reach the tasks
    root = bundle.config(bundle.TaskSpec("/r", "/t", 1234, 99, True, False, ["true"], {}, "/"))
    assert root["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1234, "size": 1}]  # type: ignore[index]
    assert all("nosuid" in m["options"] for m in root["mounts"] if m["type"] == "none")  # type: ignore[union-attr,index,operator,attr-defined]


def test_the_workdir_is_the_jobs_where_the_container_has_it(tmp_path: pathlib.Path) -> None:
    (tmp_path / "rootfs/opt/app").mkdir(parents=True)
    os.symlink("/etc", tmp_path / "rootfs/escape")
    (tmp_path / "data/sub").mkdir(parents=True)
    binds = [mounts.Mount(str(tmp_path / "data"), "/data")]
    rootfs = str(tmp_path / "rootfs")
    assert _exists_inside("/opt/app", rootfs, binds)
    assert _exists_inside("/data/sub", rootfs, binds)
    assert not _exists_inside("/data/none", rootfs, binds)
    assert not _exists_inside("/escape", rootfs, binds)  # the image's link is not followed


def _staged(cache: ImageCache, size: int) -> str:
    stage = os.path.join(cache.root, "staging", os.urandom(4).hex())
    os.makedirs(os.path.join(stage, "rootfs", "bin"))
    with open(os.path.join(stage, "rootfs", "bin", "blob"), "wb") as f:
        f.write(os.urandom(size))
    os.chmod(os.path.join(stage, "rootfs", "bin", "blob"), 0o4777)
    return os.path.join(stage, "rootfs")


@needs_root
def test_the_cache_strips_setuid_and_evicts_the_least_recently_used(tmp_path: pathlib.Path) -> None:
    cache = ImageCache(str(tmp_path / "cache"), cap_bytes=300 * 1024)
    digests = [f"sha256:{i:064x}" for i in range(3)]
    first = cache.install(
        digests[0], _staged(cache, 100 * 1024), source="a", env=[], entrypoint=[], workdir=""
    )
    mode = os.stat(os.path.join(first.rootfs, "bin", "blob")).st_mode
    assert mode & 0o6022 == 0  # no setuid, no group/other write
    cache.install(
        digests[1], _staged(cache, 100 * 1024), source="b", env=[], entrypoint=[], workdir=""
    )
    os.utime(os.path.join(cache.root, "images", key_of(digests[1]), "meta.json"), (1, 1))
    cache.hold(first.key)
    cache.install(
        digests[2], _staged(cache, 150 * 1024), source="c", env=[], entrypoint=[], workdir=""
    )
    assert cache.lookup(digests[1]) is None  # least recently used, not held
    assert cache.lookup(digests[0]) is not None and cache.lookup(digests[2]) is not None
    with pytest.raises(ContainerError, match="more than the node's whole image cache"):
        cache.install(
            f"sha256:{9:064x}",
            _staged(cache, 400 * 1024),
            source="d",
            env=[],
            entrypoint=[],
            workdir="",
        )


@needs_root
def test_two_jobs_asking_for_one_image_import_it_once(tmp_path: pathlib.Path) -> None:
    if shutil.which("mksquashfs") is None or not os.path.exists("/bin/busybox"):
        pytest.skip("needs squashfs-tools and busybox-static")
    from corral.testing.images import build
    from noded.containers.images import Importer

    base = tmp_path / "img"
    tmp_path.chmod(0o755)
    images = build(str(base))
    unpacked: list[str] = []

    class Counting(Importer):
        async def _unsquash(self, blob: str, stage: str, digest: str, source: str):  # type: ignore[no-untyped-def]
            unpacked.append(digest)
            return await super()._unsquash(blob, stage, digest, source)

    cache = ImageCache(str(tmp_path / "cache"), 1 << 30)
    me = pwd.getpwuid(os.getuid())
    who = Identity(None, me.pw_uid, me.pw_gid, [])

    async def both() -> list[str]:
        got = await asyncio.gather(
            *(Counting(cache, ContainersConfig()).get(images.squashfs, who, "/") for _ in range(2))
        )
        return [g.key for g in got]

    keys = asyncio.run(both())
    assert keys[0] == keys[1] and len(unpacked) == 1
