"""--container-mounts=SRC[:DST[:FLAGS]][,...]: parsed, and checked as the job's user.

Every bind is made by crun running as the user, so the kernel already refuses a
source the user cannot reach; the check here only turns that into a clear error before
anything starts. Every bind is nosuid and nodev whatever the flags say.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.containerspec import mount_fields, parse_mount
from corral.errors import CorralError
from noded.containers import asuser
from noded.containers.errors import container_error
from noded.spawn import Identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import corral_pb2 as pb

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
    """Pyxis's ``SRC[:DST[:FLAGS]]`` (FLAGS ``+``-separated), with the one grammar
    (corral.containerspec): the config's default_mounts, and a job from a 1.0 ctld,
    which sends no parsed mounts."""
    found: list[Mount] = []
    for spec in specs:
        if not spec.strip():
            continue
        try:
            entry = parse_mount(spec.strip(), cwd)
        except CorralError as exc:
            raise container_error(exc.message) from None
        src, dst, flags = mount_fields(entry)
        found.append(Mount(src, dst, readonly="ro" in flags, noexec="noexec" in flags))
    return found


def of_job(spec: pb.ContainerSpec, cwd: str) -> list[Mount]:
    """The job's --container-mounts: as ctld parsed them at submit (``parsed_mounts``),
    or parsed here when its ctld was 1.0 and sent only the strings."""
    if spec.parsed_mounts or not spec.mounts:
        return [Mount(m.source, m.target, m.read_only, m.no_exec) for m in spec.parsed_mounts]
    return parse(list(spec.mounts), cwd)


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
