"""Fake nodes as real containers (``isolation="container"``, ``corral up --isolation
container``): each node's noded runs in a podman container from corral's image
(scripts/build-image.sh), inside the node's network namespace of netns.py.

What a container adds to a netns node: its own process table (a PID namespace: its
jobs see only its processes, and killing the container kills every one of them at
once), its own root filesystem and /etc from the image, and its own spool (the other
nodes' spools are hidden under an empty directory). What it shares with the host, as compute nodes
share a site's services: the users (/etc/passwd and /etc/group, read-only, as LDAP
would), /tmp and the cluster's state directory (the shared filesystem that job scripts,
output files and ctld's socket live on) and the host's Python with the project's code
(read-only, so the commands a job runs, srun inside a batch script, resolve as on the
host). ctld runs on the host, on the bridge.

noded runs as root in its container: it starts each job as the job's user (podman's
default capabilities include SETUID/SETGID/KILL; SYS_NICE is added, for binding another
user's processes to their CPUs). On a cgroup v1 host the container's
cgroup mounts are read-only and noded runs without job cgroups (it says so at start);
on a cgroup v2 host with ``--cgroupns=private`` it gets a subtree of its own.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from corral.localcluster.netns import NodeNetwork

IMAGE_ENV = "CORRAL_IMAGE"
DEFAULT_IMAGE = "localhost/corral:dev"
LABEL = "corral.localcluster"  # the cluster's tag: leftovers are found by it


def available() -> tuple[bool, str]:
    if shutil.which("podman") is None:
        return False, "no podman command"
    return True, ""


def image() -> str:
    return os.environ.get(IMAGE_ENV, DEFAULT_IMAGE)


def image_present(name: str) -> bool:
    return (
        subprocess.run(
            ["podman", "image", "exists", name], capture_output=True, check=False
        ).returncode
        == 0
    )


def ulimits() -> list[str]:
    """``nofile=S:H`` and ``nproc=S:H`` at the host's own limits: podman's defaults are
    above what a container in a container may set (crun's setrlimit is refused without
    CAP_SYS_RESOURCE), so every container gets these."""
    limits = []
    for flag, which, cap in (
        ("nofile", resource.RLIMIT_NOFILE, 1 << 20),
        ("nproc", resource.RLIMIT_NPROC, 16384),
    ):
        soft, hard = resource.getrlimit(which)
        hard = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
        soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        limits.append(f"{flag}={soft}:{hard}")
    return limits


@functools.cache
def refresh(name: str) -> str:
    """Make the local image ``name`` this checkout's, once per process: when it was built
    from another tree (its ``corral.build-key`` label), scripts/build-image.sh builds it
    or loads it from its content-hash cache, so a changed noded never goes untested in a
    stale image. Returns what was done; nothing outside a checkout or without the image."""
    script = Path(__file__).resolve().parents[3] / "scripts" / "build-image.sh"
    if not script.exists() or not image_present(name):
        return "nothing"
    key = subprocess.run(
        [str(script), "--print-key"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    fmt = '{{index .Labels "corral.build-key"}}'
    label = subprocess.run(
        ["podman", "image", "inspect", "--format", fmt, name],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if label == key:
        return "current"
    env = {**os.environ, IMAGE_ENV: name}
    subprocess.run([str(script)], env=env, capture_output=True, check=True, timeout=1800)
    return "rebuilt"


def _host_code() -> list[str]:
    """The host's Python and this project's code: job scripts run the host's commands."""
    import corral

    code = Path(corral.__file__).resolve().parents[1]
    if (code.parent / "pyproject.toml").exists():  # a checkout: its scripts and tests too
        code = code.parent
    dirs = {sys.prefix, sys.base_prefix, str(code)}
    return sorted(d for d in dirs if d != "/" and not d.startswith("/usr"))


@dataclass(frozen=True)
class NodeContainers:
    network: NodeNetwork
    image: str

    def name(self, index: int) -> str:
        return self.network.namespace(index)

    @property
    def ctld_name(self) -> str:
        return f"crl{self.network.tag}-ctld"

    def _common(self, name: str) -> list[str]:
        return [
            "podman",
            "run",
            "--rm",
            "--replace",
            "--name",
            name,
            "--label",
            f"{LABEL}={self.network.tag}",
            "--init",
            *(arg for limit in ulimits() for arg in ("--ulimit", limit)),
        ]

    def wrap_ctld(self, argv: list[str], env: dict[str, str]) -> list[str]:
        """``podman run`` of ctld from the image (``ctld_container``): its own process
        table and root filesystem, the host's network (it listens on the bridge), as
        the image's user corral (uid 990: the entrypoint drops to it). It sees only the
        state directory (its store, keys, socket directory) and /tmp."""
        state = self.network.state_dir
        args = [*self._common(self.ctld_name), "--network", "host"]
        args += ["--hostname", "corral-controller", "-v", f"{state}:{state}", "-v", "/tmp:/tmp"]
        for key in ("CORRAL_CONF", "PYTHONUNBUFFERED"):
            if key in env:
                args += ["--env", f"{key}={env[key]}"]
        return [*args, self.image, "ctld", *argv[3:]]

    def kill_ctld(self) -> None:
        subprocess.run(
            ["podman", "kill", "--signal", "KILL", self.ctld_name],
            capture_output=True,
            check=False,
            timeout=60,
        )

    def wrap(self, index: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """``podman run`` of noded (``argv[1:]`` after the Python) in node ``index``'s
        container; in the foreground, so its pid file and SIGTERM work as for a process."""
        state = self.network.state_dir
        node = self.network.nodes[index]
        spool = state / "spool"
        mounts = [
            f"{state}:{state}",
            "/tmp:/tmp",
            f"{self.network.hosts_file}:/etc/hosts:ro",
            "/etc/passwd:/etc/passwd:ro",
            "/etc/group:/etc/group:ro",
            # the other nodes' spools are not this node's disk: an empty directory over
            # them (a bind, not a tmpfs: podman mounts binds in path order after tmpfses,
            # so the state directory's bind would cover a tmpfs again)
            f"{state / 'run' / 'no-spool' / node}:{spool}:ro",
            f"{spool / node}:{spool / node}",
            *(f"{d}:{d}:ro" for d in _host_code()),
        ]
        (spool / node).mkdir(parents=True, exist_ok=True)
        # only this node's mount point in it
        (state / "run" / "no-spool" / node / node).mkdir(mode=0o755, parents=True, exist_ok=True)
        args = [
            *self._common(self.name(index)),
            "--hostname",
            node,
            "--network",
            f"ns:/var/run/netns/{self.network.namespace(index)}",
            "--no-hosts",
            "--cap-add",
            "SYS_NICE",  # noded binds its jobs (another user's processes) to their CPUs
        ]
        for mount in mounts:
            args += ["-v", mount]
        for key in ("CORRAL_CONF", "PYTHONUNBUFFERED"):
            if key in env:
                args += ["--env", f"{key}={env[key]}"]
        # argv is [python, "-m", "noded", ...]: the image's entrypoint runs its own noded
        return [*args, self.image, "noded", *argv[3:]]

    def kill(self, index: int) -> None:
        """The node dies: every process in its container at once."""
        subprocess.run(
            ["podman", "kill", "--signal", "KILL", self.name(index)],
            capture_output=True,
            check=False,
            timeout=60,
        )


CTLD_UID = 990  # the image's user corral (scripts/build-image.sh)


def give_to_ctld(paths: list[Path]) -> None:
    """What ctld in its container writes or reads as corral: its state directory (the
    store, ready file), its socket directory and its keys."""
    for path in paths:
        if path.exists():
            os.chown(path, CTLD_UID, CTLD_UID)


def remove_all(tag: str) -> list[str]:
    """Remove every container of the cluster tagged ``tag`` (a crashed run's leftovers)."""
    if not available()[0]:
        return []
    listed = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label={LABEL}={tag}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if listed:
        subprocess.run(["podman", "rm", "-f", *listed], capture_output=True, check=False)
    return listed
