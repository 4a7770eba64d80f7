"""LocalCluster: real ctld and noded processes under one state directory.

Behind ``corral up`` / ``corral down`` and, through corral/testing (which adds the
harness's helper API), the integration tests and bench/. Each node is a separate
noded process with fake GPUs on its own loopback address (127.0.0.2, 127.0.0.3, ...)
or in a network namespace of its own (netns.py), or all nodes are played by one node
simulator process (simnodes/); the controller's ports are picked free. Everything a
cluster owns (config, store, logs, pid files, spool, job output) lives under
``state_dir`` (layout.py), so clusters in parallel never meet, and ``stop`` (or
``corral down``, pidfiles.py) ends exactly the processes that this state dir's pid
files name.

The daemons are started as subprocesses (``python -m ctld``), never imported: corral
imports none of ctld, noded or the commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from corral.localcluster.containers import give_to_ctld
from corral.localcluster.containers import remove_all as remove_containers
from corral.localcluster.jobs import kill_jobs
from corral.localcluster.layout import Layout, ctld_name
from corral.localcluster.pidfiles import stop_by_pidfile
from corral.localcluster.sockets import remove_sockets as remove_socket

PORT_ATTEMPTS = 3  # fresh ports for a ctld whose chosen port was taken meanwhile


@dataclass
class LocalCluster(Layout):
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # each node's (agent, step, stream) ports once started: a restart takes them again
    node_ports: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # a daemon's own interpreter, by process name ("ctld", "node01"): another corral's
    # venv, as in a rolling upgrade (tests/integration/test_rolling_upgrade.py); the
    # others run ``python``
    interpreters: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------ processes

    def _spawn(
        self,
        name: str,
        args: list[str],
        wrap: Callable[[list[str], dict[str, str]], list[str]] | None = None,
    ) -> subprocess.Popen[bytes]:
        log = open(self.state_dir / "log" / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
        env = dict(os.environ)
        env["CORRAL_CONF"] = str(self.config_path)
        env["PYTHONUNBUFFERED"] = "1"
        argv = [self.interpreters.get(name, self.python), *args]
        proc = subprocess.Popen(
            wrap(argv, env) if wrap else argv,
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
        ctrs = self.containers if self.ctld_container else None
        if ctrs is not None:
            self.ctld_dir.mkdir(mode=0o700, exist_ok=True)
            run = self.state_dir / "run"
            keys = [self.jwt_key_path, self.metrics_token_path]
            keys += [self.tls_dir / "ctld.key", self.tls_dir / "ctld.crt"]
            give_to_ctld([self.ctld_dir, run, Path(self.socket).parent, *keys])
        self._spawn(
            name, args, wrap=(lambda argv, env: ctrs.wrap_ctld(argv, env)) if ctrs else None
        )
        self._wait_file(ready, name, timeout)

    def start_node(self, index: int, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Start node ``index``'s noded; started again, on the ports it had (as a real
        node's are fixed: a restarted noded's sruns reopen their streams there). Ready
        once registered; ``wait=False``: started, whether ctld takes it or not."""
        name = self.node_names[index]
        ready = self.state_dir / "run" / f"{name}.ready"
        ready.unlink(missing_ok=True)
        agent, step, stream = self.node_ports.get(name, (0, 0, 0))
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
                str(agent),
                "--step-port",
                str(step),
                "--stream-port",
                str(stream),
                "--ready-file",
                str(ready),
            ],
            wrap=self._in_namespace(index),
        )
        if not wait:
            return
        self._wait_file(ready, name, timeout)
        fields = ready.read_text().split()
        ports = [int(f.rpartition(":")[2]) for f in fields[1:4]]
        if len(ports) == 3:  # (step, agent, stream) as it printed them
            self.node_ports[name] = (ports[1], ports[0], ports[2])

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
                "corral.localcluster.simnodes",
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

    def _in_namespace(self, index: int) -> Callable[[list[str], dict[str, str]], list[str]] | None:
        net, ctrs = self.network, self.containers
        if ctrs is not None:
            return lambda argv, env: ctrs.wrap(index, argv, env)
        if net is None:
            return None
        return lambda argv, env: net.wrap(index, argv)

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

    def start(self, timeout: float = 60.0) -> Self:
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
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.client().get_nodes({}).get("nodes", [])
            if sum(n.get("state") in up_states for n in nodes) == self.nodes:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not up after {timeout}s: {json.dumps(nodes)[:500]}")
            time.sleep(0.05)

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
        """SIGKILL, as a crash would: nothing gets to clean up (a container node: the
        container, every process in it at once)."""
        if self.containers is not None and name in self.node_names:
            self.containers.kill(self.node_names.index(name))
        if self.containers is not None and self.ctld_container and name == ctld_name(0):
            self.containers.kill_ctld()
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

    def kill_jobs(self, index: int) -> None:
        """Every process of the node's jobs, and their supervisors (a node that dies)."""
        kill_jobs(self.state_dir, [self.node_names[index]])

    def kill_node(self, index: int, *, with_jobs: bool = True) -> None:
        """A node dies: SIGKILL its noded and (``with_jobs``) every process of its jobs.

        Without ``with_jobs`` only noded dies and its jobs run on, as after a noded crash.
        A container node always dies whole, its container and everything in it at once:
        a noded crash that leaves its jobs running is a process-node fault only.
        """
        self.kill_process(self.node_names[index])
        if with_jobs and self.containers is None:
            self.kill_jobs(index)

    def cut_node(self, index: int, *, up: bool = False) -> None:
        """Take the node's network link down (``up=True`` heals it); netns clusters only."""
        if self.network is None:
            raise RuntimeError("cutting a node off needs isolation='netns'")
        self.network.set_link(index, up)

    def cut_controller(self, *, up: bool = False) -> None:
        """Cut ctld off from every node, the nodes still reaching one another (``up=True``
        heals it); netns clusters only."""
        if self.network is None:
            raise RuntimeError("cutting ctld off needs isolation='netns'")
        self.network.set_controller_link(up)

    def stop(self) -> None:
        """Stop nodes first, then their jobs (a stopped noded leaves them running for the
        next one to take over: a cluster taken down ends them), then ctld (the standbys
        first)."""
        ctlds = [ctld_name(i) for i in reversed(range(self.controllers))]
        for name in [n for n in list(self.procs) if n not in ctlds]:
            self.stop_process(name)
        if self.containers is None:
            kill_jobs(self.state_dir, self.node_names)
        for name in ctlds:
            if name in self.procs:
                self.stop_process(name)
        if self.containers is not None:
            remove_containers(self.network.tag if self.network else "")
        if self.network is not None:
            self.network.destroy()
        if self._socket_dir and self.ctld_container:  # back to the cluster's owner
            with contextlib.suppress(OSError):
                os.chown(self._socket_dir, os.stat(self.state_dir).st_uid, -1)
        remove_socket(self.state_dir)
        self._socket_dir = ""  # started again, it gets a new one

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
