"""Hostile container images for the security tests, each made as any user could make
it, without privilege: device nodes and setuid/setgid files from mksquashfs pseudo-file
definitions and from a hand-written tar layer, an /etc that is a link to a host
directory, and a private image holding a secret file (docs/security.md, "Container
images")."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

from corral.testing.images import BuiltImages, make_rootfs, run

# where the planted nodes sit in the image (crun covers /dev with a tmpfs of its own)
PLANTED = "opt/planted"
PRIVATE_FILE = "opt/private.txt"


@dataclass(frozen=True)
class HostileImages:
    devices_squashfs: str  # char and block devices, a FIFO, a socket, setuid/setgid files
    devices_archive: str  # an OCI archive whose top layer holds the same
    etc_link_squashfs: str  # /etc is a link to ``secret_dir`` on the host


def _squash(rootfs: str, dest: str, *pseudo: str) -> str:
    argv = ["mksquashfs", rootfs, dest, "-noappend", "-quiet", "-no-progress", "-comp", "lzo"]
    for definition in pseudo:
        argv += ["-p", definition]
    subprocess.run(argv, check=True, capture_output=True)
    return dest


def _device_layer(path: str) -> None:
    """A tar layer written by hand: the tar format lets anyone record a device."""
    with tarfile.open(path, "w") as t:
        for name in ("opt", PLANTED):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        for name, kind, major, minor in (
            ("null", tarfile.CHRTYPE, 1, 3),
            ("disk", tarfile.BLKTYPE, 7, 0),
        ):
            info = tarfile.TarInfo(f"{PLANTED}/{name}")
            info.type, info.mode, info.devmajor, info.devminor = kind, 0o666, major, minor
            t.addfile(info)
        fifo = tarfile.TarInfo(f"{PLANTED}/fifo")
        fifo.type, fifo.mode = tarfile.FIFOTYPE, 0o666
        t.addfile(fifo)
        with open("/bin/busybox", "rb") as f:
            body = f.read()
        for name, mode in (("bin/layer-suid", 0o4755), ("bin/layer-sgid", 0o2755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), mode
            t.addfile(info, io.BytesIO(body))


def build_hostile(base: str, built: BuiltImages, secret_dir: str) -> HostileImages:
    """Every hostile image under ``base``, from the plain test images ``built``."""
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    rootfs = make_rootfs(os.path.join(base, "rootfs"))
    shutil.copy2("/bin/busybox", os.path.join(rootfs, "bin", "busybox-sgid"))
    os.chmod(os.path.join(rootfs, "bin", "busybox-sgid"), 0o2755)
    devices = _squash(
        rootfs,
        os.path.join(base, "devices.sqsh"),
        f"{PLANTED} d 755 root root",
        f"{PLANTED}/null c 666 root root 1 3",
        f"{PLANTED}/disk b 666 root root 7 0",
        f"{PLANTED}/fifo i 666 root root f",
        f"{PLANTED}/socket i 666 root root s",
    )
    layout = os.path.join(base, "devices-layout")
    shutil.copytree(built.layout, layout)
    layer = os.path.join(base, "layer.tar")
    _device_layer(layer)
    run("umoci", "raw", "add-layer", "--image", f"{layout}:test", layer)
    archive = os.path.join(base, "devices.oci.tar")
    with tarfile.open(archive, "w") as t:
        t.add(layout, arcname=".")
    shutil.rmtree(os.path.join(rootfs, "etc"))
    os.symlink(secret_dir, os.path.join(rootfs, "etc"))
    etc_link = _squash(rootfs, os.path.join(base, "etc-link.sqsh"))
    for path in (devices, archive, etc_link):
        os.chmod(path, 0o644)
    return HostileImages(devices, archive, etc_link)


def private_image(rootfs: str, dest: str, secret: str) -> str:
    """A squashfs of ``rootfs`` with ``secret`` in /opt/private.txt, mode 0600."""
    _squash(rootfs, dest, f"{PRIVATE_FILE} f 444 root root echo {secret}")
    os.chmod(dest, 0o600)
    return dest


def private_layout(layout: str, dest: str, secret: str) -> str:
    """A copy of the OCI layout ``layout`` with ``secret`` in /opt/private.txt (a layer
    of its own)."""
    shutil.copytree(layout, dest)
    layer = dest + ".layer.tar"
    with tarfile.open(layer, "w") as t:
        data = f"{secret}\n".encode()
        info = tarfile.TarInfo(PRIVATE_FILE)
        info.size, info.mode = len(data), 0o444
        t.addfile(info, io.BytesIO(data))
    run("umoci", "raw", "add-layer", "--image", f"{dest}:test", layer)
    run("umoci", "gc", "--layout", dest)
    os.unlink(layer)
    return dest


def forged_layout(private: str, dest: str) -> str:
    """A layout naming the image of ``private`` without its layers: its index, manifest
    and config (small, and no secret: what a digest or a registry may show) only."""
    os.makedirs(os.path.join(dest, "blobs", "sha256"))
    for name in ("index.json", "oci-layout"):
        shutil.copy(os.path.join(private, name), os.path.join(dest, name))
    with open(os.path.join(private, "index.json")) as f:
        manifest = json.load(f)["manifests"][0]["digest"].split(":")[1]
    blobs = os.path.join(private, "blobs", "sha256")
    with open(os.path.join(blobs, manifest)) as f:
        config = json.load(f)["config"]["digest"].split(":")[1]
    for digest in (manifest, config):
        shutil.copy(os.path.join(blobs, digest), os.path.join(dest, "blobs", "sha256", digest))
    return dest
