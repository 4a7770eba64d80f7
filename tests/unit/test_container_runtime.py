"""noded/containers' pure parts and its image cache on a real file system."""

from __future__ import annotations

import asyncio
import os
import pathlib
import pwd
import shutil
import stat

import pytest

from corral.config import ContainersConfig
from noded.containers import bundle, mounts
from noded.containers.cache import Image, ImageCache, entry_key
from noded.containers.errors import ContainerError
from noded.containers.refs import is_path, parse_registry
from noded.containers.runtime import Containers, _exists_inside
from noded.containers.sanitize import sanitize
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


def test_noded_mounts_what_ctld_parsed_and_parses_only_a_1_0_ctlds_strings() -> None:
    from corral.wire import corral_pb2 as pb

    spec = pb.ContainerSpec(mounts=["/ignored:/x"])
    spec.parsed_mounts.add(source="/data", target="/in", read_only=True, no_exec=True)
    assert mounts.of_job(spec, "/w") == [mounts.Mount("/data", "/in", True, True)]
    from_1_0 = pb.ContainerSpec(mounts=["./d:/in:noexec"])  # a 1.0 ctld sends strings only
    assert mounts.of_job(from_1_0, "/w") == [mounts.Mount("/w/d", "/in", noexec=True)]
    assert mounts.of_job(pb.ContainerSpec(), "/w") == []


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


def _staged(cache: ImageCache, size: int) -> tuple[str, int]:
    stage = os.path.join(cache.root, "staging", os.urandom(4).hex())
    os.makedirs(os.path.join(stage, "rootfs", "bin"))
    with open(os.path.join(stage, "rootfs", "bin", "blob"), "wb") as f:
        f.write(os.urandom(size))
    os.chmod(os.path.join(stage, "rootfs", "bin", "blob"), 0o4777)
    rootfs = os.path.join(stage, "rootfs")
    return rootfs, sanitize(rootfs, "test")


def _install(cache: ImageCache, key: str, size: int) -> Image:
    rootfs, used = _staged(cache, size)
    return cache.install(
        key,
        rootfs,
        used,
        digest="sha256:" + "0" * 64,
        source="t",
        env=[],
        entrypoint=[],
        workdir="",
    )


@needs_root
def test_the_cache_strips_setuid_and_evicts_the_least_recently_used(tmp_path: pathlib.Path) -> None:
    cache = ImageCache(str(tmp_path / "cache"), cap_bytes=300 * 1024)
    keys = [entry_key("file", f"sha256:{i:064x}") for i in range(3)]
    first = _install(cache, keys[0], 100 * 1024)
    mode = os.stat(os.path.join(first.rootfs, "bin", "blob")).st_mode
    assert mode & 0o6022 == 0  # no setuid, no group/other write
    meta = os.path.join(cache.root, "images", keys[0], "meta.json")
    assert stat.S_IMODE(os.stat(meta).st_mode) == 0o600  # root's alone, as every file here
    _install(cache, keys[1], 100 * 1024)
    os.utime(os.path.join(cache.root, "images", keys[1], "meta.json"), (1, 1))
    cache.hold(first.key)
    _install(cache, keys[2], 150 * 1024)
    assert cache.lookup(keys[1]) is None  # least recently used, not held
    assert cache.lookup(keys[0]) is not None and cache.lookup(keys[2]) is not None
    with pytest.raises(ContainerError, match="more than the node's whole image cache"):
        _install(cache, entry_key("file", f"sha256:{9:064x}"), 400 * 1024)


def test_a_registry_entry_is_its_registry_and_repositorys_alone() -> None:
    digest = "sha256:" + "a" * 64
    here = entry_key("registry", digest, "registry.local/team/img")
    assert here == entry_key("registry", digest, "registry.local/team/img")
    # the same manifest from another registry, a layout or a file is another entry
    assert here != entry_key("registry", digest, "evil.example/team/img")
    assert len({here, entry_key("layout", digest), entry_key("file", digest)}) == 3
    for bad in ("sha256:xyz", "md5:" + "a" * 64, "sha256:" + "A" * 64):
        with pytest.raises(ContainerError):
            entry_key("file", bad)


@needs_root
def test_an_older_cache_is_emptied_and_made_root_only(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cache"
    old = root / "images" / ("sha256-" + "b" * 64)
    (old / "rootfs").mkdir(parents=True)
    (old / "meta.json").write_text("{}")
    (root / "memo").mkdir()
    for path in (root, root / "images", old, root / "memo"):
        path.chmod(0o711)
    cache = ImageCache(str(root), 1 << 30)
    assert not old.exists() and os.listdir(root / "staging") == []
    for sub in ("", "images", "locks", "memo", "staging"):
        st = os.stat(root / sub)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700), sub
    key = entry_key("file", "sha256:" + "c" * 64)
    _install(cache, key, 1024)
    ImageCache(str(root), 1 << 30)  # this version's: kept as it is
    assert cache.lookup(key) is not None


@needs_root
def test_containers_a_restarted_noded_took_over_keep_their_images(
    tmp_path: pathlib.Path,
) -> None:
    spool = tmp_path / "spool"
    settings = ContainersConfig(cache_size_bytes=64 * 1024)
    first = Containers(str(spool), settings)
    kept = _install(first.cache, entry_key("file", "sha256:" + "d" * 64), 40 * 1024)
    # what an older noded left beside it: moved aside, not removed while jobs are kept
    pathlib.Path(first.cache.root, "VERSION").unlink()
    job = spool / "containers" / "data" / "job_5" / "c_step0"
    job.mkdir(parents=True)
    (job / "key").write_text(kept.key)
    again = Containers(str(spool), settings)
    again.open_cache({5})
    assert [n for n in os.listdir(again.cache.root + "/staging") if n.startswith("old-")]
    (spool / "containers" / "cache" / "VERSION").write_text("")  # older once more
    third = Containers(str(spool), settings)
    third.open_cache(set())  # nothing kept: the older entries go now
    assert os.listdir(third.cache.root + "/staging") == []
    held = _install(third.cache, entry_key("file", "sha256:" + "e" * 64), 40 * 1024)
    (job / "key").write_text(held.key)
    fourth = Containers(str(spool), settings)
    fourth.open_cache({5})
    assert fourth.cache.in_use == {held.key: 1}
    _install(fourth.cache, entry_key("file", "sha256:" + "f" * 64), 40 * 1024)
    assert fourth.cache.lookup(held.key) is not None  # over the cap, yet kept: in use
    asyncio.run(fourth.job_done(5))
    assert fourth.cache.in_use == {} and not job.exists()


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
        async def _unsquash(self, blob: str, stage: str, key: str, digest: str, source: str):  # type: ignore[no-untyped-def]
            unpacked.append(digest)
            return await super()._unsquash(blob, stage, key, digest, source)

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
