"""LocalCluster: real ctld and noded processes under one state directory.

The real-process mode of the test harness (its helper API is harness.py's), behind
``corral up``, the integration tests and bench/. Each node is a separate noded process
with fake GPUs on its own loopback address (127.0.0.2, 127.0.0.3, ...); the
controller's ports are picked free. Everything a cluster owns (config, store, logs,
pid files, spool, job output) lives under ``state_dir``, so clusters in parallel never
meet, and ``stop`` (or ``corral down``) ends exactly the processes that this state
dir's pid files name.

Only the standard library is used here: the harness starts the daemons as
subprocesses (``python -m ctld``), it never imports them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.api import GrpcController
from corral.api import HttpController as Client
from corral.testing import netns
from corral.testing.harness import Harness, wait_for
from corral.testing.netns import NodeNetwork
from corral.testing.sockets import remove_sockets as remove_socket
from corral.testing.sockets import socket_dir

DEFAULT_GPU_MODEL = "NVIDIA H100 80GB HBM3"


def ctld_name(index: int) -> str:
    """The process name of controller ``index`` (its log, pid and ready files)."""
    return f"ctld{index or ''}"


PORT_ATTEMPTS = 3  # fresh ports for a ctld whose chosen port was taken meanwhile


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalCluster(Harness):
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
    # of its own with its own hostname (root only); "auto": netns when possible
    isolation: str = "loopback"
    # True: one node simulator process (corral.testing.simnodes) plays every node over
    # the real protocol instead of one noded each; jobs are timers (see simnodes.py)
    simulated: bool = False
    socket_path: str = ""  # ctld's socket; "": one in a private directory (sockets.py)
    _socket_dir: str = field(init=False, default="", repr=False)
    sim_default_runtime_s: float = 1.0
    network: NodeNetwork | None = field(init=False, default=None)
    isolation_note: str = field(init=False, default="")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        if self.simulated and self.isolation != "loopback":
            raise ValueError("simulated nodes run on loopback only")
        if self.simulated:
            # one process plays every node over one channel: it holds no per-node
            # certificate, so daemon TLS is off (ctld warns); users still authenticate
            self.tls = False
        if self.isolation not in ("loopback", "netns", "auto"):
            raise ValueError(f"isolation {self.isolation!r}: loopback, netns or auto")
        if self.isolation != "loopback":
            ok, why = netns.available()
            if ok:
                self.network = NodeNetwork(self.state_dir, tuple(self.node_names))
            elif self.isolation == "netns":
                raise RuntimeError(f"network namespaces need root and iproute2: {why}")
            else:
                self.isolation_note = f"no network namespaces ({why}): nodes on 127.0.0.x"

    # ------------------------------------------------------------ layout

    @property
    def config_path(self) -> Path:
        return self.state_dir / "corral.toml"

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
        user can have made (corral/testing/sockets.py). A file, not an abstract socket:
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
        """The cluster CA, ctld's and every node's certificate, and the JWT key."""
        from corral.auth.tls import create_cluster_certs
        from corral.auth.tokens import write_key

        if self.tls and not (self.tls_dir / "ctld.crt").exists():
            create_cluster_certs(
                str(self.tls_dir), self.cluster_name, self.node_names, [self.controller_host]
            )
        if not self.jwt_key_path.exists():
            write_key(str(self.jwt_key_path))

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
        tls = f'\n[tls]\ndir = "{self.tls_dir}"\n' if self.tls else ""
        if self.tls and self.tls_clients:
            tls += "clients = true\n"
        munge = f'munge_socket = "{self.munge_socket}"\n' if self.munge_socket else ""
        nodes_expr = f"node[{self.node_names[0][4:]}-{self.node_names[-1][4:]}]"
        # with a standby, controller.hosts names every controller (host alone is refused)
        host_line = f'host = "{self.controller_host}"\n' if self.controllers == 1 else ""
        gpus = ""
        if self.gpu_backend == "nvml":
            gpus = f'gpus = {{ backend = "nvml", shards_per_gpu = {self.shards_per_gpu} }}\n'
        elif self.gpus_per_node:
            gpus = (
                f'gpus = {{ backend = "fake", count = {self.gpus_per_node}, '
                f'model = "{self.gpu_model}", shards_per_gpu = {self.shards_per_gpu} }}\n'
            )
        text = f"""# Written by corral's LocalCluster; a local test cluster on loopback.
cluster_name = "{self.cluster_name}"

[controller]
{host_line}grpc_port = {self.grpc_port}
http_port = {self.http_port}
node_port = {self.node_port}
socket = "{self.socket}"
user = "{self.user}"
state_dir = "{self.state_dir}"
store_url = "{self.store_url}"
kill_wait_s = {self.kill_wait_s}
sched_interval_s = 2.0
{self._hosts_config()}{self.controller_config}

[auth]
type = "{self.auth_type}"
jwt_key = "{self.jwt_key_path}"
{munge}{tls}
[heartbeat]
interval_s = {self.heartbeat_interval_s}
timeout_s = {self.heartbeat_timeout_s}

[noded]
port = 0
step_port = 0
stream_port = 0
spool_dir = "{self.state_dir / "spool"}"
# one cgroup tree per local cluster, so clusters side by side never share one
cgroup_root = "corral-{hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:10]}"
sample_interval_s = {self.sample_interval_s}
health_interval_s = {min(self.sample_interval_s, 1.0)}
{self.noded_config}

[[nodes]]
names = "{nodes_expr}"
cpus = {self.cpus_per_node}
memory_mb = {self.memory_mb_per_node}
{gpus}
[[partitions]]
name = "debug"
nodes = "{nodes_expr}"
default = true
max_time = "1-00:00:00"
{self.extra_config}"""
        self.config_path.write_text(text)

    def _hosts_config(self) -> str:
        """controller.hosts, when there is a standby: each on ports of its own."""
        if self.controllers == 1:
            return ""
        entries = []
        for i in range(self.controllers):
            grpc_port, http_port, node_port = self.controller_ports(i)
            entries.append(
                f'  {{ host = "{self.controller_host}", grpc_port = {grpc_port}, '
                f"http_port = {http_port}, node_port = {node_port}, "
                f'socket = "{self.local_socket(i)}" }},\n'
            )
        return f"lease_s = {self.lease_s}\nhosts = [\n{''.join(entries)}]\n"

    def write_env_sh(self) -> None:
        bindir = Path(self.python).parent
        self.env_path.write_text(
            f"# source this to point the corral commands at the cluster in {self.state_dir}\n"
            f"export CORRAL_CONF={self.config_path}\n"
            f"export CORRAL_CTLD_HTTP={self.http_addresses}\n"
            f"export CORRAL_CTLD_SOCKET={self.sockets}\n"
            f"export CORRAL_CTLD_GRPC={self.grpc_addresses}\n"
            f"export CORRAL_CTLD_USER={self.user}\n"
            f'export PATH="{bindir}:$PATH"\n'
            "hash -r 2>/dev/null  # a shell that ran Slurm's sbatch must not keep using it\n"
            f'if [ "$(command -v sbatch)" != "{bindir}/sbatch" ]; then\n'
            "  echo \"warning: sbatch here is '$(command -v sbatch)', not corral's "
            f"({bindir}/sbatch): an alias or function shadows it "
            '(unalias sbatch; unset -f sbatch)" >&2\n'
            "fi\n"
        )

    # ------------------------------------------------------------ processes

    def _spawn(
        self, name: str, args: list[str], wrap: Callable[[list[str]], list[str]] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.state_dir / "log" / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
        env = dict(os.environ)
        env["CORRAL_CONF"] = str(self.config_path)
        env["PYTHONUNBUFFERED"] = "1"
        argv = [self.python, *args]
        proc = subprocess.Popen(
            wrap(argv) if wrap else argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            cwd=self.state_dir,
        )
        log.close()
        (self.state_dir / "run" / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.procs[name] = proc
        return proc

    def start_ctld(self, timeout: float = 30.0, index: int = 0) -> None:
        """Start controller ``index``: ready once it answers (a standby: as a standby)."""
        name = ctld_name(index)
        ready = self.state_dir / "run" / f"{name}.ready"
        ready.unlink(missing_ok=True)
        args = ["-m", "ctld", "-f", str(self.config_path), "--ready-file", str(ready)]
        if self.controllers > 1:
            args += ["--controller", str(index)]
        self._spawn(name, args)
        self._wait_file(ready, name, timeout)

    def start_node(self, index: int, timeout: float = 30.0) -> None:
        name = self.node_names[index]
        ready = self.state_dir / "run" / f"{name}.ready"
        ready.unlink(missing_ok=True)
        self._spawn(
            name,
            [
                "-m",
                "noded",
                "-f",
                str(self.config_path),
                "--name",
                name,
                "--listen",
                self.node_address(index),
                "--port",
                "0",
                "--ready-file",
                str(ready),
            ],
            wrap=self._in_namespace(index),
        )
        self._wait_file(ready, name, timeout)

    @property
    def sim_control_path(self) -> Path:
        return self.state_dir / "run" / "simnodes.sock"

    def start_simulator(self, timeout: float = 300.0) -> None:
        """One process plays every node; ready once they all registered."""
        ready = self.state_dir / "run" / "simnodes.ready"
        ready.unlink(missing_ok=True)
        self._spawn(
            "simnodes",
            [
                "-m",
                "corral.testing.simnodes",
                "-f",
                str(self.config_path),
                "--control",
                str(self.sim_control_path),
                "--default-runtime",
                str(self.sim_default_runtime_s),
                "--ready-file",
                str(ready),
                "--register-timeout",
                str(timeout),
            ],
        )
        self._wait_file(ready, "simnodes", timeout)

    def sim(self, cmd: str, nodes: str = "", **extra: Any) -> dict[str, Any]:
        """A command to the node simulator: crash, revive, fault (reason=...), stats."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.sim_control_path))
            s.sendall(json.dumps({"cmd": cmd, "nodes": nodes, **extra}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        reply: dict[str, Any] = json.loads(data)
        if not reply.get("ok"):
            raise RuntimeError(f"simnodes {cmd}: {reply.get('error')}")
        return reply

    def _in_namespace(self, index: int) -> Callable[[list[str]], list[str]] | None:
        net = self.network
        if net is None:
            return None
        return lambda argv: net.wrap(index, argv)

    def _wait_file(self, path: Path, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        proc = self.procs[name]
        while not path.exists():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode} while starting; "
                    f"log:\n{self.log_tail(name)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{name} not ready after {timeout}s; log:\n{self.log_tail(name)}"
                )
            time.sleep(0.02)

    def agent_address(self, name: str) -> str:
        """Where node ``name``'s NodeAgent takes ctld's calls (its ready file says)."""
        fields = (self.state_dir / "run" / f"{name}.ready").read_text().split()
        return fields[2] if len(fields) > 2 else fields[1]

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.state_dir / "log" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start ctld and every node; return once every node is registered and idle."""
        if self.network is not None:
            try:
                self.network.create()
            except RuntimeError as exc:
                self.network.destroy()
                if self.isolation == "netns":
                    raise
                # "auto": a host that refuses namespaces still gets a working cluster
                self.network = None
                self.isolation_note = f"no network namespaces ({exc}): nodes on 127.0.0.x"
        chosen_ports = not (self.grpc_port or self.http_port or self.node_port)
        self.write_config()
        self.write_env_sh()
        try:
            self._start_controllers(retry_ports=chosen_ports)
            if self.simulated:
                self.start_simulator(max(timeout, 60.0 + self.nodes * 0.2))
            else:
                for i in range(self.nodes):
                    self.start_node(i)
            self.wait_nodes_up(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_controllers(self, *, retry_ports: bool) -> None:
        """Start every ctld. A port chosen free may be taken before ctld binds it
        (another test's daemon, a kernel-chosen port): new ports are chosen then."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                for i in range(self.controllers):
                    self.start_ctld(index=i)
                return
            except RuntimeError as exc:
                if not retry_ports or "cannot listen on" not in str(exc):
                    raise
                if attempt == PORT_ATTEMPTS - 1:
                    raise
                for name in [n for n in self.procs if n.startswith("ctld")]:
                    self.kill_process(name)
                self.grpc_port = self.http_port = self.node_port = 0
                self.extra_ports = []
                self.write_config()
                self.write_env_sh()

    def wait_nodes_up(self, timeout: float = 30.0) -> None:
        up_states = ("NODE_STATE_IDLE", "NODE_STATE_MIXED", "NODE_STATE_ALLOCATED")
        nodes: list[Any] = []

        def all_up() -> bool:
            nodes[:] = self.client().get_nodes({}).get("nodes", [])
            return sum(n.get("state") in up_states for n in nodes) == self.nodes

        try:
            wait_for(all_up, timeout, "nodes up", interval=0.05)
        except AssertionError:
            raise TimeoutError(
                f"nodes not up after {timeout}s: {json.dumps(nodes)[:500]}"
            ) from None

    def stop_process(self, name: str, timeout: float = 15.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            (self.state_dir / "run" / f"{name}.pid").unlink(missing_ok=True)
            return
        stop_by_pidfile(self.state_dir, name, timeout)

    def kill_process(self, name: str) -> None:
        """SIGKILL, as a crash would: nothing gets to clean up."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait(10)
        (self.state_dir / "run" / f"{name}.pid").unlink(missing_ok=True)

    # ------------------------------------------------------------ fault injection

    def node_job_pids(self, index: int) -> set[int]:
        """Processes of the jobs the node's nodeds (this one and earlier ones) started.

        Found by the job marker in their environment, whose last part is the instance
        token of the noded that started them (listed in its spool's ``instances``).
        """
        name = self.node_names[index]
        try:
            text = (self.state_dir / "spool" / name / "instances").read_text()
        except OSError:
            return set()
        tokens = {t.strip() for t in text.split() if t.strip()}
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for var in env:
                if var.startswith(b"CORRAL_JOB_MARKER="):
                    marker = var.split(b"=", 1)[1].decode(errors="replace")
                    if marker.startswith(name + ":") and marker.rpartition(":")[2] in tokens:
                        found.add(int(entry.name))
        return found

    def kill_node(self, index: int, *, with_jobs: bool = True) -> None:
        """A node dies: SIGKILL its noded and (``with_jobs``) every process of its jobs.

        Without ``with_jobs`` only noded dies and its jobs run on, as after a noded crash.
        """
        self.kill_process(self.node_names[index])
        if with_jobs:
            deadline = time.monotonic() + 10
            while (pids := self.node_job_pids(index)) and time.monotonic() < deadline:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.02)

    def cut_node(self, index: int, *, up: bool = False) -> None:
        """Take the node's network link down (``up=True`` heals it); netns clusters only."""
        if self.network is None:
            raise RuntimeError("cutting a node off needs isolation='netns'")
        self.network.set_link(index, up)

    def stop(self) -> None:
        """Stop nodes first (their jobs end), then ctld (the standbys first)."""
        ctlds = [ctld_name(i) for i in reversed(range(self.controllers))]
        for name in [n for n in list(self.procs) if n not in ctlds]:
            self.stop_process(name)
        for name in ctlds:
            if name in self.procs:
                self.stop_process(name)
        if self.network is not None:
            self.network.destroy()
        remove_socket(self.state_dir)
        self._socket_dir = ""  # started again, it gets a new one

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def print_logs(c: LocalCluster) -> None:
    """The daemons' last lines: pytest shows a test's captured output when it fails."""
    for name in [ctld_name(i) for i in range(c.controllers)] + c.node_names:
        print(f"----- {name} log -----\n{c.log_tail(name, 60)}")


class ClusterFactory:
    """Starts LocalClusters (or a subclass) under one private base directory, on free
    ports, and stops them all on ``close`` (printing their last log lines); the pytest
    fixtures and bench/ use it."""

    def __init__(
        self, cls: type[LocalCluster] = LocalCluster, prefix: str = "corral-test-"
    ) -> None:
        # world-readable: jobs of other users (tests that switch users) read the spool
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self.base.chmod(0o755)
        self.cls = cls
        self.started: list[LocalCluster] = []
        self.keep = False  # leave the state dirs (logs, store) for a look afterwards

    def __call__(
        self,
        configure: Callable[[Any], None] | None = None,
        start_timeout: float = 60.0,
        **kw: Any,
    ) -> LocalCluster:
        """A started cluster with these LocalCluster arguments; ``configure`` sees it
        before it starts."""
        kw.setdefault("kill_wait_s", 2.0)
        c = self.cls(self.base / f"cluster{len(self.started)}", **kw)
        if configure is not None:
            configure(c)
        self.started.append(c)
        c.start(timeout=start_timeout)
        return c

    def close(self, *, logs: bool = True) -> None:
        for c in self.started:
            c.stop()
            if logs:
                print_logs(c)
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> ClusterFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- by pid file (corral down)


def _is_ours(pid: int, state_dir: Path) -> bool:
    """The pid still belongs to a daemon of this state dir (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(str(state_dir).encode() in part for part in cmdline)


def stop_by_pidfile(state_dir: Path, name: str, timeout: float = 15.0) -> bool:
    pid_file = state_dir / "run" / f"{name}.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    if _is_ours(pid, state_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _is_ours(pid, state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_ours(pid, state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def daemon_names(state_dir: Path) -> Iterator[str]:
    run = state_dir / "run"
    if run.is_dir():
        for pid_file in sorted(run.glob("*.pid")):
            yield pid_file.stem


def stop_state_dir(state_dir: Path) -> list[str]:
    """Stop every daemon this state dir started (nodes first); return their names."""
    state_dir = state_dir.resolve()
    names = list(daemon_names(state_dir))
    ctlds = sorted((n for n in names if n.startswith("ctld")), reverse=True)
    stopped = [n for n in names if n not in ctlds and stop_by_pidfile(state_dir, n)]
    stopped += [n for n in ctlds if stop_by_pidfile(state_dir, n)]
    remove_socket(state_dir)
    if netns.available()[0]:  # namespaces and bridge of a netns cluster, if any
        stopped += NodeNetwork(state_dir, ()).destroy()
    return stopped
