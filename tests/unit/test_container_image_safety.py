"""What noded does with an image's contents, which it does not trust: the unpacked tree
made safe (sanitize.py), a file of it read without leaving it (beneath.py), a layout's
tar written back with nothing but a layout in it (layouttar.py), and a layout's blobs
checked against their digests (ociconfig.py). On real files; devices need root."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pathlib
import stat
import tarfile

import pytest

from noded.containers import beneath, layouttar, ociconfig
from noded.containers.errors import ContainerError
from noded.containers.sanitize import sanitize

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="devices and chown need root")


@needs_root
def test_an_unpacked_tree_keeps_no_device_socket_setid_bit_or_xattr(
    tmp_path: pathlib.Path,
) -> None:
    host = tmp_path / "host-file"
    host.write_text("the host's\n")
    host.chmod(0o4700)
    root = tmp_path / "rootfs"
    (root / "opt" / "sub").mkdir(parents=True)
    os.mknod(root / "opt" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(root / "opt" / "disk", 0o666 | stat.S_IFBLK, os.makedev(7, 0))
    os.mkfifo(root / "opt" / "fifo", 0o666)
    os.mknod(root / "opt" / "sock", 0o666 | stat.S_IFSOCK)
    for name, mode in (("suid", 0o4777), ("sgid", 0o2755)):
        (root / "opt" / name).write_text("x")
        (root / "opt" / name).chmod(mode)
        os.chown(root / "opt" / name, 1234, 1234)
    try:  # a file system without user xattrs (tmpfs before 6.6) has none to strip
        os.setxattr(root / "opt" / "suid", "user.corral", b"1")
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
    (root / "opt" / "sub").chmod(0o2777)
    os.symlink(host, root / "opt" / "escape")  # a link out: never followed
    assert sanitize(str(root), "test") > 0
    assert sorted(os.listdir(root / "opt")) == ["escape", "fifo", "sgid", "sub", "suid"]
    for name in ("suid", "sgid", "sub", "fifo"):
        st = os.lstat(root / "opt" / name)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o6022) == (0, 0, 0), name
    assert os.listxattr(root / "opt" / "suid") == []
    assert stat.S_IMODE(os.stat(root / "opt" / "suid").st_mode) == 0o755
    assert stat.S_IMODE(host.stat().st_mode) == 0o4700  # the host file is untouched


def test_a_file_of_the_image_is_read_as_the_image_resolves_it(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "environment").write_text("LEAKED=1\n")
    root = tmp_path / "rootfs"
    (root / "usr" / "etc").mkdir(parents=True)
    (root / "usr" / "etc" / "environment").write_text("A=1\n")
    os.symlink("/usr/etc", root / "etc")  # the image's own link: followed inside it
    os.symlink(str(secret), root / "abs")  # links out, absolute and relative
    os.symlink("../../../../../../" + str(secret).lstrip("/"), root / "rel")
    os.symlink("/proc/self/root" + str(secret), root / "magic")
    os.mkfifo(root / "fifo")
    assert beneath.read_file(str(root), "etc/environment", 100) == b"A=1\n"
    for path in ("abs/environment", "rel/environment", "magic/environment", "fifo", "none"):
        assert beneath.read_file(str(root), path, 100) is None, path
    # without openat2: a path through any link is not read at all
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            beneath._open_no_links(fd, "abs/environment")
        os.close(beneath._open_no_links(fd, "usr/etc/environment"))
    finally:
        os.close(fd)


def _tar(path: pathlib.Path, members: list[tuple[str, bytes | str | None, str]]) -> None:
    """(name, body or link target, kind) with kind "file", "dir", "sym", "hard", "chr"."""
    with tarfile.open(path, "w") as t:
        for name, body, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = body if isinstance(body, bytes) else b""
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
            }[kind]
            if isinstance(body, str):
                info.linkname = body
            t.addfile(info)


def test_a_layout_tar_gives_back_only_a_layout(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11.2 (Debian 12) has no extractall(filter=): nothing may need it
    monkeypatch.delattr(tarfile.TarFile, "extractall")
    tar = tmp_path / "layout.tar"
    _tar(
        tar,
        [
            ("./", None, "dir"),
            ("./oci-layout", b"{}", "file"),
            ("./index.json", b"{}", "file"),
            ("./blobs/sha256/abc", b"blob", "file"),
            ("./../outside", b"x", "file"),
            ("/etc/corral-abs", b"x", "file"),
            ("./README", b"skipped", "file"),
        ],
    )
    dest = tmp_path / "out"
    layouttar.extract(str(tar), str(dest), "img")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == [
        "blobs",
        "blobs/sha256",
        "blobs/sha256/abc",
        "index.json",
        "oci-layout",
    ]
    assert not (tmp_path / "outside").exists() and not os.path.exists("/etc/corral-abs")
    for hostile in (
        [("./index.json", "/etc/shadow", "sym")],
        [("./blobs", "/root", "sym"), ("./blobs/sha256/x", b"x", "file")],
        [("./blobs/sha256/x", "/etc/passwd", "hard")],
        [("./blobs/sha256/x", None, "chr")],
    ):
        _tar(tar, hostile)  # type: ignore[arg-type]
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        with pytest.raises(ContainerError, match="not an OCI image layout"):
            layouttar.extract(str(tar), str(out), "img")
        assert not (pathlib.Path("/root") / "sha256").exists()


def _put(layout: pathlib.Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def test_a_layout_that_names_an_image_without_holding_it_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    layout = tmp_path / "layout"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    layer = _put(layout, b"a layer")
    config = _put(layout, json.dumps({"config": {"Env": ["A=1"]}}).encode())
    manifest = {"config": {"digest": config}, "layers": [{"digest": layer}]}
    mdigest = _put(layout, json.dumps(manifest).encode())

    def index(digest: str) -> None:
        (layout / "index.json").write_text(json.dumps({"manifests": [{"digest": digest}]}))

    index(mdigest)
    found = ociconfig.tag_layout(str(layout), "t", "img")
    assert (found.manifest, found.env, found.layers) == (mdigest, ["A=1"], [layer])
    ociconfig.check_layers(str(layout), found, "img")
    # a layer missing, or not what its digest says
    (layout / "blobs" / "sha256" / layer.split(":")[1]).write_bytes(b"another layer")
    with pytest.raises(ContainerError, match="digest mismatch"):
        ociconfig.check_layers(str(layout), found, "img")
    (layout / "blobs" / "sha256" / layer.split(":")[1]).unlink()
    with pytest.raises(ContainerError, match="missing"):
        ociconfig.check_layers(str(layout), found, "img")
    # an index naming a manifest digest its blob does not have
    forged = "sha256:" + "f" * 64
    (layout / "blobs" / "sha256" / ("f" * 64)).write_text(json.dumps(manifest))
    index(forged)
    with pytest.raises(ContainerError, match="digest mismatch"):
        ociconfig.tag_layout(str(layout), "t", "img")
    for bad in ("../../etc/passwd", "sha256:../../x", ["a"]):
        (layout / "index.json").write_text(json.dumps({"manifests": [{"digest": bad}]}))
        with pytest.raises(ContainerError, match="not an image"):
            ociconfig.tag_layout(str(layout), "t", "img")
