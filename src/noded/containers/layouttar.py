"""An OCI image layout directory, as the tar stream the user's own ``tar`` made of it,
turned back into root's staged copy.

Only what a layout is made of is written: ``oci-layout``, ``index.json`` and the
files under ``blobs/``, as plain directories and regular files (root's, 0700 and
0600); any other member is skipped, and a link, device or other special file among
those names is refused. Nothing is written outside the destination, nothing is
followed, and nothing depends on TarFile.extractall's ``filter`` (Python 3.11.4 on;
Debian 12 ships 3.11.2).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tarfile

from noded.containers.errors import container_error

KEPT_FILES = ("oci-layout", "index.json")
BLOBS = "blobs"


def _name(member: tarfile.TarInfo) -> list[str] | None:
    """The member's path as components, or None when it is not a layout's."""
    parts = [p for p in member.name.split("/") if p and p != "."]
    if not parts or ".." in parts:
        return None
    if parts[0] == BLOBS or (len(parts) == 1 and parts[0] in KEPT_FILES):
        return parts
    return None


def extract(tar_path: str, dest: str, source: str) -> None:
    """Write the layout of the tar at ``tar_path`` into the new directory ``dest``."""
    os.mkdir(dest, 0o700)
    dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with tarfile.open(tar_path, "r:") as t:
            for member in t:
                parts = _name(member)
                if parts is None:
                    continue
                if not (member.isdir() or member.isreg()):
                    raise container_error(
                        f"image {source}: not an OCI image layout "
                        f"({'/'.join(parts)} is a link or a special file)"
                    )
                _write(t, member, parts, dest_fd)
    except tarfile.TarError as exc:
        raise container_error(f"image {source}: not an OCI image layout ({exc})") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the caller says disk full
            raise
        raise container_error(f"image {source}: not an OCI image layout ({exc})") from None
    finally:
        os.close(dest_fd)


def _write(t: tarfile.TarFile, member: tarfile.TarInfo, parts: list[str], dest_fd: int) -> None:
    """``parts`` under ``dest_fd``, its directories made as needed, no link followed."""
    fd = os.dup(dest_fd)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last and member.isreg():
                out = os.open(
                    part,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=fd,
                )
                body = t.extractfile(member)
                assert body is not None  # a regular member always has a body
                with os.fdopen(out, "wb") as f:
                    shutil.copyfileobj(body, f, 1 << 20)
                return
            # a directory met before is reused (O_DIRECTORY refuses anything else)
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
