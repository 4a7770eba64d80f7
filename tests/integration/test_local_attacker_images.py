"""A user's container image against noded, which imports it as root (issue 34).

Real second users (tests/integration/realusers.py) on a real one-node cluster with a
real runtime (crun, fuse-overlayfs): images made without privilege carrying device
nodes, setuid files, or an /etc that is a link to a root-only host directory; and a
private image of alice's that bob tries to reach through the cache, through the paths
`ps` shows, and through a layout of his that names her image's digest
(docs/security.md, "Container images").
"""

from __future__ import annotations

import os
import pathlib
import pwd
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator

import psutil
import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.hostile_images import (
    PLANTED,
    HostileImages,
    build_hostile,
    forged_layout,
    private_image,
    private_layout,
)
from corral.testing.images import BuiltImages
from tests.conftest import wait_for
from tests.integration.realusers import Users, as_user, command, open_dir, submit_as

pytestmark = pytest.mark.timeout(240)

SECRET = "corral-secret-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def secret_dir() -> Iterator[pathlib.Path]:
    """A root-only host directory holding an ``environment`` with a secret in it."""
    path = open_dir("corral-rootonly-")
    (path / "environment").write_text(f"LEAKED={SECRET}\n")
    (path / "environment").chmod(0o600)
    path.chmod(0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def hostile(images: BuiltImages, secret_dir: pathlib.Path) -> Iterator[HostileImages]:
    base = open_dir("corral-hostile-")
    try:
        yield build_hostile(str(base / "img"), images, str(secret_dir))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def lab(users: Users, images: BuiltImages, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(nodes=1, gpus_per_node=0)


def _cache(lab: LocalCluster) -> pathlib.Path:
    return lab.state_dir / "spool" / lab.node_names[0] / "containers" / "cache"


def _srun(
    lab: LocalCluster, users: Users, who: pwd.struct_passwd, *argv: str
) -> tuple[int, str, str]:
    return command(lab, who, "srun", "-N1", *argv, cwd=users.home(who))


def _private_dir(users: Users, who: pwd.struct_passwd, name: str) -> pathlib.Path:
    path = users.home(who) / name
    path.mkdir(mode=0o700)
    os.chown(path, who.pw_uid, who.pw_gid)
    return path


def _give(path: pathlib.Path, who: pwd.struct_passwd) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, who.pw_uid, who.pw_gid)


def _opened_by(who: pwd.struct_passwd, paths: list[str]) -> list[str]:
    """The paths of ``paths`` that ``who`` can open (a file read, a directory listed)."""

    def body() -> None:
        for path in paths:
            try:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    with open(path, "rb") as f:
                        f.read(1)
            except OSError:
                continue
            print(path)

    code, out, err = as_user(who, body)
    assert code == 0, err
    return out.splitlines()


def _no_device_or_setid_under(root: pathlib.Path) -> list[str]:
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            kind = stat.S_IFMT(st.st_mode)
            if kind in (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK) or st.st_mode & 0o6000:
                bad.append(f"{os.path.join(dirpath, name)} {oct(st.st_mode)}")
    return bad


def test_device_nodes_and_setuid_bits_of_an_image_reach_neither_the_cache_nor_the_job(
    lab: LocalCluster, users: Users, hostile: HostileImages
) -> None:
    alice = users.alice
    show = f"stat -c '%n|%F|%a' /{PLANTED}/* /bin/*-suid /bin/*-sgid"
    for image in (hostile.devices_squashfs, hostile.devices_archive):
        code, out, err = _srun(lab, users, alice, f"--container-image={image}", "sh", "-c", show)
        assert code == 0, err
        seen = dict(line.split("|", 1) for line in out.splitlines())
        assert not [f for f, kind in seen.items() if "special" in kind or "socket" in kind], out
        setid = [f for f in seen if f.endswith(("-suid", "-sgid"))]
        assert len(setid) >= 2 and all(seen[f].endswith("|755") for f in setid), out
    # nor in the cache, where root imported it
    assert _no_device_or_setid_under(_cache(lab)) == []


def test_an_etc_that_links_to_a_root_only_host_directory_leaks_nothing(
    lab: LocalCluster, users: Users, hostile: HostileImages
) -> None:
    alice = users.alice
    image = f"--container-image={hostile.etc_link_squashfs}"
    code, out, err = _srun(lab, users, alice, image, "sh", "-c", "env; cat /etc/environment")
    assert SECRET not in out + err
    assert code != 0 and "No such file" in err  # the link leads nowhere inside
    # noded read nothing through the link: not in the cache, its logs, or its spool
    found = []
    for dirpath, _, filenames in os.walk(lab.state_dir):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    if SECRET.encode() in f.read():
                        found.append(path)
    assert found == []


def test_bob_reaches_alices_private_image_neither_through_the_cache_nor_what_ps_shows(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice, bob = users.alice, users.bob
    private = _private_dir(users, alice, "private")
    image = private_image(images.rootfs, str(private / "mine.sqsh"), SECRET)
    _give(private, alice)
    job_id = submit_as(lab, users, alice, f"--container-image={image}", "--wrap", "sleep 300")
    try:
        lab.wait_state(job_id, "RUNNING", timeout=60)

        def alices(name: str) -> list[list[str]]:
            return [
                p.info["cmdline"]
                for p in psutil.process_iter(["cmdline", "uids", "name"])
                if p.info["uids"] is not None
                and p.info["uids"].real == alice.pw_uid
                and p.info["cmdline"]
                and os.path.basename(p.info["cmdline"][0]) == name
            ]

        wait_for(lambda: alices("fuse-overlayfs") and alices("crun"), 30, "her container to run")
        cache = str(_cache(lab))
        argvs = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
        keys = [e.name for e in pathlib.Path(cache).glob("images/*")]
        assert keys and [a for a in argvs if cache in a or any(k in a for k in keys)] == []
        # every path her container's processes show, and what is under them
        (fuse,) = alices("fuse-overlayfs")
        shown = [fuse[-1]]
        options = fuse[fuse.index("-o") + 1].split(",")
        shown += [
            o.split("=", 1)[1]
            for o in options
            if o.startswith(("lowerdir=", "upperdir=", "workdir="))
        ]
        lower = next(o.split("=", 1)[1] for o in options if o.startswith("lowerdir="))
        shown.append(os.path.join(lower, "opt", "private.txt"))
        for crun in alices("crun"):
            bundle = crun[crun.index("--bundle") + 1]
            shown += [crun[crun.index("--root") + 1], bundle, os.path.join(bundle, "config.json")]
        # and the cache itself, by its paths on disk
        entries = sorted(pathlib.Path(cache).glob("images/*"))
        assert entries
        for entry in entries:
            shown += [str(entry / "meta.json"), str(entry / "rootfs" / "opt" / "private.txt")]
        shown += [cache, os.path.join(cache, "images")]
        assert _opened_by(bob, shown) == []
    finally:  # her container goes, whatever was found
        command(lab, alice, "scancel", str(job_id))
        lab.wait_state(job_id, "CANCELLED", timeout=60)


def test_bob_cannot_use_the_cache_entry_of_alices_private_layout_by_naming_its_digest(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice, bob = users.alice, users.bob
    layout = private_layout(
        images.layout, str(_private_dir(users, alice, "oci") / "layout"), SECRET
    )
    _give(pathlib.Path(layout).parent, alice)
    code, out, err = _srun(
        lab, users, alice, f"--container-image={layout}", "cat", "/opt/private.txt"
    )
    assert (code, out.strip()) == (0, SECRET), err  # hers, now in the cache
    # bob's own layout: her index, manifest and config (no secret in them), no layer
    forged = forged_layout(layout, str(users.home(bob) / "forged"))
    _give(pathlib.Path(forged), bob)
    code, out, err = _srun(
        lab, users, bob, f"--container-image={forged}", "cat", "/opt/private.txt"
    )
    assert SECRET not in out + err
    assert code != 0 and "not an image" in err, err


def test_a_cache_an_older_noded_left_is_made_root_only_and_emptied_at_start(
    lab: LocalCluster,
) -> None:
    cache = _cache(lab)
    lab.kill_node(0, with_jobs=False)
    # the layout of an older noded: directories 0711, a world-readable meta.json and a
    # device node a user's image brought
    shutil.rmtree(cache, ignore_errors=True)
    entry = cache / "images" / f"sha256-{'a' * 64}"
    (entry / "rootfs").mkdir(parents=True)
    (entry / "meta.json").write_text('{"digest": "sha256:' + "a" * 64 + '", "size": 0}')
    os.mknod(entry / "rootfs" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for sub in ("locks", "memo", "staging"):
        (cache / sub).mkdir()
    subprocess.run(["chmod", "-R", "go+rX", str(cache)], check=True)
    lab.start_node(0)
    # by the time noded is up, before any container asks for it
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and cache.stat().st_uid == 0
    wait_for(lambda: not entry.exists(), 30, "the older entry to go")
    assert _no_device_or_setid_under(cache) == []
    assert all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in [cache, *cache.iterdir()]), [
        (p, oct(p.stat().st_mode)) for p in cache.iterdir()
    ]
