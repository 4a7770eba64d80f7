"""Small container images built offline for tests and benches: a static busybox with
its applet links and an /etc/os-release, packed as squashfs (enroot's .sqsh), as an
OCI image layout (umoci) and as an OCI archive. No network, no daemon."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

BUSYBOX = "/bin/busybox"
OS_RELEASE = 'NAME="Corral Test Linux"\nID=corraltest\nVERSION_ID="1"\n'
APPLETS = tuple(
    "sh cat id ls echo sleep env pwd touch mkdir rm test stat head tail true false "  # noqa: SIM905
    "grep wc dd kill ps uname hostname sync mount readlink".split()
)
TOOLS = ("mksquashfs", "umoci", "skopeo", "crun", "fuse-overlayfs", "unsquashfs")


def missing_tools() -> list[str]:
    have = [t for t in TOOLS if shutil.which(t) is None]
    if not os.path.isfile(BUSYBOX):
        have.append(BUSYBOX)
    return have


def make_rootfs(path: str, *, filler_bytes: int = 0) -> str:
    """busybox, its links, /etc/os-release, a setuid-root copy of busybox (a hostile
    image's), an empty /home and /tmp; ``filler_bytes`` of random data in /opt/filler
    (a big image)."""
    for sub in ("bin", "etc", "home", "tmp", "opt", "root", "proc", "dev", "sys"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
    shutil.copy2(BUSYBOX, os.path.join(path, "bin", "busybox"))
    for applet in APPLETS:
        os.symlink("busybox", os.path.join(path, "bin", applet))
    shutil.copy2(BUSYBOX, os.path.join(path, "bin", "busybox-suid"))
    os.chmod(os.path.join(path, "bin", "busybox-suid"), 0o4755)
    with open(os.path.join(path, "etc", "os-release"), "w") as f:
        f.write(OS_RELEASE)
    with open(os.path.join(path, "etc", "environment"), "w") as f:
        f.write("IMAGE_VAR=from-image\n")
    os.chmod(os.path.join(path, "tmp"), 0o1777)
    if filler_bytes:
        with open(os.path.join(path, "opt", "filler"), "wb") as f:
            left = filler_bytes
            while left > 0:
                chunk = os.urandom(min(left, 1 << 20))
                f.write(chunk)
                left -= len(chunk)
    return path


def runtime_blocker() -> str:
    """Why crun cannot run containers on this host ("" when it can): on a hybrid
    cgroup hierarchy crun refuses any controller left on the v2 side (hugetlb, often);
    .ci/run mounts those on v1."""
    from corral.hybridcgroups import cgroup_blocker

    return cgroup_blocker()


@dataclass(frozen=True)
class BuiltImages:
    rootfs: str
    squashfs: str
    layout: str  # an OCI image layout directory
    archive: str  # an OCI archive (a tar of the layout)


def build(base: str, *, filler_bytes: int = 0, oci: bool = True) -> BuiltImages:
    """Every form of the test image under ``base`` (world-readable, for any test user);
    without ``oci`` the squashfs only (a big image's layout and archive: "")."""
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    rootfs = make_rootfs(os.path.join(base, "rootfs"), filler_bytes=filler_bytes)
    sqsh = os.path.join(base, "image.sqsh")
    subprocess.run(
        ["mksquashfs", rootfs, sqsh, "-noappend", "-quiet", "-no-progress", "-comp", "lzo"]
        if filler_bytes == 0
        else [
            "mksquashfs",
            rootfs,
            sqsh,
            "-noappend",
            "-quiet",
            "-no-progress",
            "-noI",
            "-noD",
            "-noF",
        ],
        check=True,
        capture_output=True,
    )
    if not oci:
        _world_readable(base)
        return BuiltImages(rootfs, sqsh, "", "")
    layout = os.path.join(base, "layout")
    bundle = os.path.join(base, "umoci-bundle")
    run("umoci", "init", "--layout", layout)
    run("umoci", "new", "--image", f"{layout}:test")
    run("umoci", "unpack", "--rootless", "--image", f"{layout}:test", bundle)
    shutil.rmtree(os.path.join(bundle, "rootfs"))
    shutil.copytree(rootfs, os.path.join(bundle, "rootfs"), symlinks=True)
    run("umoci", "repack", "--image", f"{layout}:test", bundle)
    run(
        "umoci",
        "config",
        "--image",
        f"{layout}:test",
        "--config.env",
        "IMAGE_VAR=from-oci",
        "--config.env",
        "PATH=/bin",
    )
    run("umoci", "gc", "--layout", layout)
    shutil.rmtree(bundle)
    archive = os.path.join(base, "image.oci.tar")
    with tarfile.open(archive, "w") as t:
        t.add(layout, arcname=".")
    _world_readable(base)
    return BuiltImages(rootfs, sqsh, layout, archive)


def _world_readable(base: str) -> None:
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)


def run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)
