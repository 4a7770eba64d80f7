"""--container-mounts=SRC[:DST[:FLAGS]][,...]: parsed, and checked as the job's user.

Every bind is made by crun running as the user, so the kernel already refuses a
source the user cannot reach; the check here only turns that into a clear error before
anything starts. Every bind is nosuid and nodev whatever the flags say.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.containerspec import parse_mount
from corral.errors import CorralError
from noded.containers import asuser
from noded.containers.errors import container_error
from noded.spawn import Identity

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
        if self.source == "tmpfs":  # Pyxis's tmpfs:DST, the container's own
            return {
                "destination": self.destination,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", *(["ro"] if self.readonly else [])],
            }
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
    """Pyxis's ``SRC[:DST[:FLAGS]]`` (FLAGS ``+``-separated), checked again here with
    the client's own grammar (corral.containerspec): a request may come from anyone."""
    found: list[Mount] = []
    for spec in specs:
        if not spec.strip():
            continue
        try:
            entry = parse_mount(spec.strip(), cwd)
        except CorralError as exc:
            raise container_error(exc.message) from None
        src, dst, *rest = entry.split(":")
        flags = set(rest[0].split("+")) if rest else set()
        if dst in ("/", "/proc", "/sys", "/dev") or dst.startswith(("/proc/", "/sys/")):
            raise container_error(f"--container-mounts: {spec!r}: cannot mount over {dst}")
        found.append(Mount(src, dst, readonly="ro" in flags, noexec="noexec" in flags))
    return found


async def check(mounts: list[Mount], who: Identity) -> None:
    """Each source exists and is readable by the user (their own rights, not root's)."""
    mounts = [m for m in mounts if m.source != "tmpfs"]
    if not mounts:
        return
    res = await asuser.run(
        ["/bin/sh", "-c", _CHECK, "corral-mounts", *(m.source for m in mounts)],
        who=who,
        timeout_s=30.0,
        what="check the container's mounts",
    )
    if res.rc != 0:
        raise container_error(f"--container-mounts: {res.reason()}")
