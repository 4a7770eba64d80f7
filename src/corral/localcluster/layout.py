"""A local cluster's layout: everything under its state directory and how to reach it.

The ports, node names and addresses, ctld's Unix socket (in a private directory,
sockets.py), the certificates and JWT key, the config file and env.sh (their text:
configfile.py), the environment and clients for commands that talk to it. Nothing
here starts a process (cluster.py does).
"""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from corral.api import GrpcController
from corral.api import HttpController as Client
from corral.localcluster import configfile, containers, netns
from corral.localcluster.containers import NodeContainers
from corral.localcluster.netns import NodeNetwork
from corral.localcluster.sockets import socket_dir

DEFAULT_GPU_MODEL = "NVIDIA H100 80GB HBM3"


def ctld_name(index: int) -> str:
    """The process name of controller ``index`` (its log, pid and ready files)."""
    return f"ctld{index or ''}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Layout:
    state_dir: Path
    nodes: int = 2
    gpus_per_node: int = 8
    cpus_per_node: int = 16
    memory_mb_per_node: int = 64 * 1024
    gpu_model: str = DEFAULT_GPU_MODEL
    shards_per_gpu: int = 0  # gres/shard on every node's GPUs (0: none)
    gpu_backend: str = "fake"  # "nvml": the machine's real GPUs (corral up --gpus)
    cluster_name: str = "corral"
    heartbeat_interval_s: float = 2.0
    heartbeat_timeout_s: float = 10.0
    kill_wait_s: float = 5.0
    python: str = sys.executable
    extra_config: str = ""  # appended at the end (new tables)
    noded_config: str = ""  # more keys of the [noded] table
    controller_config: str = ""  # more keys of the [controller] table
    heartbeat_config: str = ""  # more keys of the [heartbeat] table
    sample_interval_s: float = 1.0
    grpc_port: int = 0
    http_port: int = 0
    node_port: int = 0
    # more than one: a standby (or several) on ports of its own, all in controller.hosts
    # (failover needs store_url on PostgreSQL); the first is started first
    controllers: int = 1
    lease_s: float = 3.0
    extra_ports: list[tuple[int, int, int]] = field(default_factory=list)  # standbys' ports
    # authentication: "local" (the Unix socket), "munge" or "jwt" for TCP clients; a JWT
    # key and the cluster's certificates are always made (docs/security.md)
    auth_type: str = "local"
    munge_socket: str = ""
    tls: bool = True
    tls_clients: bool = False  # TLS on the client ports too (commands need CORRAL_CTLD_CA)
    store_url: str = ""  # empty: SQLite in state_dir
    # "loopback": nodes on 127.0.0.2, .3, ...; "netns": each node in a network namespace
    # of its own with its own hostname (root only); "auto": netns when possible;
    # "container": each node's noded in a podman container from corral's image, in its
    # network namespace (containers.py; root, podman and the image)
    isolation: str = "loopback"
    # True: one node simulator process (corral.localcluster.simnodes) plays every node
    # over the real protocol instead of one noded each; jobs are timers (simnodes/)
    simulated: bool = False
    # isolation="container" only: ctld too in a container of the image, as its user corral
    ctld_container: bool = False
    socket_path: str = ""  # ctld's socket; "": one in a private directory (sockets.py)
    _socket_dir: str = field(init=False, default="", repr=False)
    sim_default_runtime_s: float = 1.0
    network: NodeNetwork | None = field(init=False, default=None)
    containers: NodeContainers | None = field(init=False, default=None)
    isolation_note: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        if self.simulated and self.isolation != "loopback":
            raise ValueError("simulated nodes run on loopback only")
        if self.simulated:
            # one process plays every node over one channel: it holds no per-node
            # certificate, so daemon TLS is off (ctld warns); users still authenticate
            self.tls = False
        if self.isolation not in ("loopback", "netns", "auto", "container"):
            raise ValueError(f"isolation {self.isolation!r}: loopback, netns, auto or container")
        if self.isolation != "loopback":
            ok, why = netns.available()
            if ok:
                self.network = NodeNetwork(self.state_dir, tuple(self.node_names))
            elif self.isolation in ("netns", "container"):
                raise RuntimeError(f"network namespaces need root and iproute2: {why}")
            else:
                self.isolation_note = f"no network namespaces ({why}): nodes on 127.0.0.x"
        if self.isolation == "container" and self.network is not None:
            ok, why = containers.available()
            if not ok:
                raise RuntimeError(f"container nodes need podman: {why}")
            if not containers.image_present(containers.image()):
                raise RuntimeError(
                    f"container nodes need corral's image {containers.image()} "
                    "(scripts/build-image.sh builds it)"
                )
            self.containers = NodeContainers(self.network, containers.image())
        if self.ctld_container and self.containers is None:
            raise ValueError("ctld_container needs isolation='container'")

    # ------------------------------------------------------------ layout

    @property
    def config_path(self) -> Path:
        return self.state_dir / "corral.toml"

    @property
    def ctld_dir(self) -> Path:
        """controller.state_dir (its store, web key): the cluster's state directory, or,
        when ctld runs in a container as corral, a directory of it that corral owns alone
        (noded refuses a state directory above its spool that others may change)."""
        return self.state_dir / "ctld" if self.ctld_container else self.state_dir

    @property
    def env_path(self) -> Path:
        return self.state_dir / "env.sh"

    @property
    def node_names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"node{i + 1:0{width}d}" for i in range(self.nodes)]

    def node_address(self, index: int) -> str:
        if self.network is not None:
            return self.network.node_ip(index)
        return f"127.0.0.{2 + index}"

    @property
    def controller_host(self) -> str:
        """Where ctld listens: the bridge when nodes live in namespaces."""
        return self.network.bridge_ip if self.network is not None else "127.0.0.1"

    @property
    def http_address(self) -> str:
        return f"{self.controller_host}:{self.http_port}"

    @property
    def socket(self) -> str:
        """ctld's Unix socket: a short path any user can reach, in a directory no other
        user can have made (sockets.py). A file, not an abstract socket:
        those are per network namespace, and commands in jobs on netns nodes use it."""
        return self.socket_path or self.local_socket()

    def local_socket(self, index: int = 0) -> str:
        """Controller ``index``'s socket in the cluster's socket directory (chosen once:
        a child that became another user reads it from here, not from the disk)."""
        if not self._socket_dir:
            self._socket_dir = socket_dir(self.state_dir)
        return os.path.join(self._socket_dir, f"ctld{index or ''}.sock")

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    @property
    def jwt_key_path(self) -> Path:
        return self.state_dir / "jwt.key"

    @property
    def metrics_token_path(self) -> Path:
        """controller.metrics_token_file: the bearer token a scrape of /metrics sends."""
        return self.state_dir / "metrics.token"

    def metrics_url(self) -> str:
        scheme = "https" if self.tls and self.tls_clients else "http"
        return f"{scheme}://{self.http_address}/metrics"

    def scrape(self, timeout: float = 10.0) -> str:
        """/metrics as Prometheus scrapes it: with the token (and the cluster's CA)."""
        import ssl
        import urllib.request

        token = self.metrics_token_path.read_text().strip()
        request = urllib.request.Request(
            self.metrics_url(), headers={"Authorization": f"Bearer {token}"}
        )
        tls = None
        if self.tls and self.tls_clients:
            tls = ssl.create_default_context(cafile=str(self.tls_dir / "ca.crt"))
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as reply:
            return str(reply.read().decode())

    @property
    def grpc_address(self) -> str:
        return f"{self.controller_host}:{self.grpc_port}"

    def controller_ports(self, index: int) -> tuple[int, int, int]:
        """grpc, http and node port of controller ``index``."""
        if index == 0:
            return self.grpc_port, self.http_port, self.node_port
        return self.extra_ports[index - 1]

    @property
    def http_addresses(self) -> str:
        """Every controller's gateway, in order (comma-separated, as the env var)."""
        return ",".join(
            f"{self.controller_host}:{self.controller_ports(i)[1]}" for i in range(self.controllers)
        )

    @property
    def sockets(self) -> str:
        if self.controllers == 1:
            return self.socket
        return ",".join(self.local_socket(i) for i in range(self.controllers))

    @property
    def user(self) -> str:
        """Who runs the daemons: the commands trust a socket this user serves."""
        if self.ctld_container:
            return str(containers.CTLD_UID)  # the image's corral: no such user on the host
        return pwd.getpwuid(os.geteuid()).pw_name

    @property
    def grpc_addresses(self) -> str:
        return ",".join(
            f"{self.controller_host}:{self.controller_ports(i)[0]}" for i in range(self.controllers)
        )

    def env(self) -> dict[str, str]:
        """Environment for commands that talk to this cluster (over its Unix socket)."""
        env = dict(os.environ)
        env["CORRAL_CONF"] = str(self.config_path)
        env["CORRAL_CTLD_HTTP"] = self.http_addresses
        env["CORRAL_CTLD_SOCKET"] = self.sockets
        env["CORRAL_CTLD_GRPC"] = self.grpc_addresses
        env["CORRAL_CTLD_USER"] = self.user
        bindir = str(Path(self.python).parent)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        return env

    def client(self, index: int | None = None) -> Client:
        """A client of this cluster as this process's own user (the Unix sockets: of
        whichever controller is primary, or of controller ``index`` alone)."""
        if index is not None:
            return Client(socket_path=self.local_socket(index))
        if self.controllers == 1:
            return Client(socket_path=self.socket)
        return Client(targets=list[tuple[str, int] | str](self.sockets.split(",")))

    def tcp_client(self, token: str | None = None) -> Client:
        """A client over TCP: it needs a credential (``token``, or munge)."""
        host, _, port = self.http_address.rpartition(":")
        return Client((host, int(port)), socket_path="", token=token)

    def token(self, user: str, lifetime_s: int = 3600) -> str:
        """A JWT for ``user``, as ``corral token`` issues it."""
        from corral.auth.tokens import issue, read_key

        return issue(read_key(str(self.jwt_key_path)), user, lifetime_s)

    def grpc_metadata(self, user: str = "") -> list[tuple[str, str]]:
        """gRPC metadata that authenticates ``user`` (default: this process's user)."""
        name = user or pwd.getpwuid(os.getuid()).pw_name
        return [("authorization", f"Bearer {self.token(name)}")]

    def make_credentials(self) -> None:
        """The cluster CA, ctld's and every node's certificate, the JWT key and the
        metrics token."""
        from corral.auth.tls import create_cluster_certs
        from corral.auth.tokens import write_key

        if self.tls and not (self.tls_dir / "ctld.crt").exists():
            create_cluster_certs(
                str(self.tls_dir), self.cluster_name, self.node_names, [self.controller_host]
            )
        if not self.jwt_key_path.exists():
            write_key(str(self.jwt_key_path))
        if not self.metrics_token_path.exists():
            fd = os.open(self.metrics_token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")

    def grpc_client(self, user: str = "") -> GrpcController:
        """The typed Controller client over gRPC, with a token for ``user`` (default:
        this process's user): gRPC gives ctld no kernel identity."""
        name = user or pwd.getpwuid(os.getuid()).pw_name
        return GrpcController(self.grpc_address, token=self.token(name))

    def write_config(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("log", "run", "spool"):
            (self.state_dir / sub).mkdir(exist_ok=True)
        if not self.grpc_port:
            self.grpc_port = free_port()
        if not self.http_port:
            self.http_port = free_port()
        if not self.node_port:
            self.node_port = free_port()
        while len(self.extra_ports) < self.controllers - 1:
            self.extra_ports.append((free_port(), free_port(), free_port()))
        self.make_credentials()
        self.config_path.write_text(configfile.config_text(self))

    def write_env_sh(self) -> None:
        self.env_path.write_text(configfile.env_sh_text(self))
