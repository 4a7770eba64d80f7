"""--container-mounts=SRC:DST[:FLAGS][,...]: parsed, and checked as the job's user.

Every bind is made by crun running as the user, so the kernel already refuses a
source the user cannot reach; the check here only turns that into a clear error before
anything starts. Every bind is nosuid and nodev whatever the flags say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from noded.containers import asuser
from noded.containers.errors import ContainerError
from noded.spawn import Identity

FLAGS = {"ro", "rw", "nosuid", "nodev", "noexec", "rbind", "bind"}
PROPAGATION = {"private", "rprivate", "slave", "rslave"}
_CHECK = (
    'for p; do [ -e "$p" ] || { echo "$p: no such file or directory" >&2; exit 1; }; '
    '[ -r "$p" ] || { echo "$p: permission denied" >&2; exit 1; }; done'
)


@dataclass(frozen=True)
class Mount:
    source: str
    destination: str
    readonly: bool = False
    noexec: bool = False

    def oci(self) -> dict[str, object]:
        options = ["rbind", "nosuid", "nodev", "rprivate"]
        if self.readonly:
            options.append("ro")
        if self.noexec:
            options.append("noexec")
        return {
            "destination": self.destination,
            "type": "none",
            "source": self.source,
            "options": options,
        }


def parse(specs: list[str], cwd: str) -> list[Mount]:
    """Pyxis's forms: ``SRC:DST[:FLAGS]`` or ``PATH`` (the same path inside). FLAGS are
    colon- or plus-separated mount options (ro, rw, nosuid, nodev, noexec, rbind, ...)."""
    mounts: list[Mount] = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        parts = spec.split(":")
        if len(parts) > 3 and not all(p in FLAGS | PROPAGATION for p in parts[2:]):
            raise ContainerError(f"bad --container-mounts entry {spec!r}: SRC:DST[:FLAGS]")
        src = parts[0]
        dst = parts[1] if len(parts) > 1 and parts[1] else src
        flags: set[str] = set()
        for part in parts[2:]:
            flags.update(f for f in part.replace("+", ",").split(",") if f)
        unknown = flags - FLAGS - PROPAGATION
        if unknown:
            raise ContainerError(
                f"bad --container-mounts entry {spec!r}: unknown flag {sorted(unknown)[0]!r}"
            )
        if not src:
            raise ContainerError(f"bad --container-mounts entry {spec!r}: no source")
        src = os.path.normpath(os.path.join(cwd, src))
        if not dst.startswith("/") or ".." in dst.split("/"):
            raise ContainerError(
                f"bad --container-mounts entry {spec!r}: the destination must be an "
                "absolute path without '..'"
            )
        dst = os.path.normpath(dst)
        if dst in ("/", "/proc", "/sys", "/dev") or dst.startswith(("/proc/", "/sys/")):
            raise ContainerError(f"bad --container-mounts entry {spec!r}: cannot mount over {dst}")
        mounts.append(Mount(src, dst, readonly="ro" in flags, noexec="noexec" in flags))
    return mounts


async def check(mounts: list[Mount], who: Identity) -> None:
    """Each source exists and is readable by the user (their own rights, not root's)."""
    if not mounts:
        return
    res = await asuser.run(
        ["/bin/sh", "-c", _CHECK, "corral-mounts", *(m.source for m in mounts)],
        who=who,
        timeout_s=30.0,
        what="check the container's mounts",
    )
    if res.rc != 0:
        raise ContainerError(f"--container-mounts: {res.reason()}")
