"""crun's config.json for one task: the OCI runtime spec of a rootless container that
shares the host's network, IPC and process ids (NCCL, shared memory, and noded's own
signals and accounting work as on the host) and has its own mounts and user namespace.

The user namespace maps one id: the job's uid (and gid) to itself, or to 0 with
--container-remap-root. Root inside owns nothing outside: every other host id,
root's included, is unmapped (nobody) inside, and no_new_privileges makes setuid
files inert.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from noded.containers.gpu import GpuEdits
from noded.containers.mounts import Mount

OCI_VERSION = "1.0.2"
HOST_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
# what a remapped root keeps, all inside its own user namespace (never the host's)
ROOT_CAPS = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
]


@dataclass(frozen=True)
class TaskSpec:
    rootfs: str  # the container's root (its overlay mount)
    tmp_dir: str  # the container's /tmp, shared by its tasks
    uid: int
    gid: int
    remap_root: bool
    readonly: bool
    args: list[str]
    env: dict[str, str]
    cwd: str
    mounts: list[Mount] = field(default_factory=list)
    gpu: GpuEdits = field(default_factory=GpuEdits)


def _bind(source: str, destination: str, *extra: str) -> dict[str, object]:
    return {
        "destination": destination,
        "type": "none",
        "source": source,
        "options": ["rbind", "nosuid", "rprivate", *extra],
    }


def config(task: TaskSpec) -> dict[str, object]:
    inside_uid = 0 if task.remap_root else task.uid
    inside_gid = 0 if task.remap_root else task.gid
    caps = ROOT_CAPS if task.remap_root else []
    mounts: list[dict[str, object]] = [
        _bind("/proc", "/proc", "nodev", "noexec"),
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        _bind("/dev/pts", "/dev/pts", "noexec"),
        _bind("/dev/shm", "/dev/shm", "nodev", "noexec"),
        _bind("/sys", "/sys", "nodev", "noexec", "ro"),
        _bind(task.tmp_dir, "/tmp", "nodev"),
    ]
    # the host's names, as enroot binds them: gloo and NCCL resolve the node's hostname
    mounts += [_bind(f, f, "nodev", "ro") for f in HOST_FILES if os.path.isfile(f)]
    mounts += [m.oci() for m in task.mounts]
    mounts += [_bind(dev, dev) for dev in task.gpu.devices]
    mounts += [_bind(host, inside, "nodev", "ro") for host, inside in task.gpu.binds]
    return {
        "ociVersion": OCI_VERSION,
        "process": {
            "terminal": False,
            "user": {"uid": inside_uid, "gid": inside_gid},
            "args": task.args,
            "env": [f"{k}={v}" for k, v in task.env.items()],
            "cwd": task.cwd,
            "noNewPrivileges": True,
            "capabilities": {name: list(caps) for name in ("bounding", "effective", "permitted")},
        },
        "root": {"path": task.rootfs, "readonly": task.readonly},
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": "user"}, {"type": "mount"}],
            "uidMappings": [{"containerID": inside_uid, "hostID": task.uid, "size": 1}],
            "gidMappings": [{"containerID": inside_gid, "hostID": task.gid, "size": 1}],
            "rootfsPropagation": "rprivate",
        },
    }
