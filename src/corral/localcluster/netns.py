"""Fake nodes as small containers: a network namespace, a hostname (UTS) and a mount
namespace (for /etc/hosts) each.

Every local cluster gets one bridge on the host (``crl<tag>``, 10.X.Y.1/24) and one
namespace per node (``crl<tag>-<node>``) joined to it by a veth pair, so each node has
an address of its own (10.X.Y.2, .3, ...) that the others reach over the bridge, and
MASTER_ADDR really is another host. The nodes reach the host itself as a compute
node reaches its login node: by any of its addresses (their default route is the
bridge) and by its hostname (which their /etc/hosts maps to the bridge address), so
a service a client starts on the host (dask's scheduler) is reachable from jobs when
it listens on the host's addresses, not on loopback only. The tag comes from the state
directory, so a leftover of a crashed run is found and removed by the next start or ``corral down``.
Needs root and iproute2; ``available`` says why not otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


def available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "not root"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return False, f"no {tool} command"
    return True, ""


@dataclass(frozen=True)
class NodeNetwork:
    state_dir: Path
    nodes: tuple[str, ...]

    @property
    def tag(self) -> str:
        return hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:6]

    @property
    def bridge(self) -> str:
        return f"crl{self.tag}"

    @property
    def _prefix(self) -> str:
        h = int(self.tag, 16)
        return f"10.{100 + h % 100}.{(h // 100) % 250 + 1}"

    @property
    def bridge_ip(self) -> str:
        return f"{self._prefix}.1"

    def node_ip(self, index: int) -> str:
        return f"{self._prefix}.{index + 2}"

    def namespace(self, index: int) -> str:
        return f"crl{self.tag}-{self.nodes[index]}"[:64]

    def _veth(self, index: int) -> str:
        return f"crl{self.tag}v{index}"  # at most 15 characters (IFNAMSIZ)

    def create(self) -> None:
        self.destroy()  # a crashed run's leftovers
        self.write_hosts()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(len(self.nodes)):
            ns, host_end, peer = self.namespace(i), self._veth(i), f"crl{self.tag}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("-n", ns, "link", "set", peer, "name", "eth0")
            _ip("link", "set", host_end, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.node_ip(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", self.bridge_ip)

    def set_link(self, index: int, up: bool) -> None:
        """Cut a node off the network (its link down) or heal it: a network partition."""
        _ip("link", "set", self._veth(index), "up" if up else "down")

    def set_controller_link(self, up: bool) -> None:
        """Cut every node off the host (where ctld runs) while they still reach one
        another over the bridge, or heal it: ctld cut off from all its nodes."""
        verb = "del" if up else "replace"
        for i in range(len(self.nodes)):
            _ip("-n", self.namespace(i), "route", verb, "blackhole", f"{self.bridge_ip}/32")

    def destroy(self) -> list[str]:
        """Remove the namespaces and the bridge (their veths go with them); what was removed."""
        gone: list[str] = []
        listed = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=False
        ).stdout.split()
        for ns in {self.namespace(i) for i in range(len(self.nodes))} | {
            n for n in listed if n.startswith(f"crl{self.tag}-")
        }:
            if ns in listed and _ip("netns", "del", ns, check=False):
                gone.append(ns)
        # the kernel frees a deleted namespace's veth only later: delete our ends now
        links = subprocess.run(
            ["ip", "-o", "link"], capture_output=True, text=True, check=False
        ).stdout
        for line in links.splitlines():
            name = line.split(":", 2)[1].strip().split("@")[0] if ":" in line else ""
            if name.startswith(f"crl{self.tag}v"):
                _ip("link", "del", name, check=False)
        if _ip("link", "del", self.bridge, check=False):
            gone.append(self.bridge)
        return gone

    def wrap(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run inside node ``index``'s namespace, under its own hostname."""
        # nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup mounts
        return [
            "nsenter",
            f"--net=/var/run/netns/{self.namespace(index)}",
            "unshare",
            "--uts",
            "--mount",
            "--",
            "/bin/sh",
            "-c",
            'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"',
            self.nodes[index],
            str(self.hosts_file),
            *argv,
        ]

    @property
    def hosts_file(self) -> Path:
        return self.state_dir / "run" / "hosts"

    def write_hosts(self) -> None:
        """Node names resolve to their namespace addresses inside every node (the file is
        bind-mounted over /etc/hosts in each node's own mount namespace)."""
        host = socket.gethostname()
        # the host as the nodes see it (a login node): its own name, often 127.0.1.1 in
        # its /etc/hosts, must lead to the bridge, not to the node's loopback
        aliases = "corral-controller" if host in self.nodes else f"corral-controller {host}"
        lines = ["127.0.0.1\tlocalhost", f"{self.bridge_ip}\t{aliases}"]
        lines += [f"{self.node_ip(i)}\t{name}" for i, name in enumerate(self.nodes)]
        self.hosts_file.parent.mkdir(parents=True, exist_ok=True)
        self.hosts_file.write_text("\n".join(lines) + "\n")


def _ip(*args: str, check: bool = True) -> bool:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0 and check:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.returncode == 0
