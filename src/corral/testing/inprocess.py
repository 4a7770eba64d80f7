"""InProcessCluster: ctld's real store and state machine in this process, no daemons.

Nomad's scheduler harness and dask's gen_cluster are the models: everything but the
network is real. A real Store on a SQLite file under ``state_dir``, the real Cluster,
a ``RecordingDispatcher`` instead of node agents and a ``ManualClock`` the test moves.
The cluster's config is the one LocalCluster writes for the same arguments (same node
names, partition, limits), and ``client()`` is the same typed Controller client,
served by the same ControllerApi as ctld's gateway, only without a socket. So a test
written against the helper API (corral/testing/harness.py) runs in either mode.

The cluster lives on an event loop this object owns: the harness is driven from plain
(synchronous) tests and hypothesis state machines; ``run(coro)`` runs one of ctld's
coroutines to completion, ``settle()`` runs a scheduling pass and the launches it
started. ``restart()`` builds a new Cluster from the same store file, as a ctld
restart does.

The async unit tests that drive ctld's ``Cluster`` methods directly build it with
``make_cluster`` (the same construction ``InProcessCluster`` uses) and register its
nodes with ``register_all`` / ``registration``.

This is the one module of ``corral`` that imports ctld (tests/unit/
test_dependency_rule.py allows exactly this): a test harness, never imported by the
programs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format

from corral import __version__
from corral.api import Controller
from corral.clock import ManualClock
from corral.config import ClusterConfig, load_config
from corral.errors import InvalidRequest, NodeUnreachable
from corral.identity import Identity, current_identity
from corral.localcluster.layout import DEFAULT_GPU_MODEL, Layout
from corral.testing.harness import Harness
from corral.wire import corral_pb2 as pb
from ctld.api.auth import Caller
from ctld.api.rpc import ControllerApi
from ctld.control.cluster import Cluster
from ctld.model.nodes import NodeRecord
from ctld.storage.store import Store

T = TypeVar("T")


@dataclass
class RecordingDispatcher:
    """Records what ctld would send to nodes.

    ``fail_launch`` simulates an unreachable node; while ``hold_launches`` is set, a
    launch waits for ``launch_gate``, so a test can act while a LaunchJob is in flight.
    """

    launched: list[tuple[str, pb.LaunchJobRequest]] = field(default_factory=list)
    signalled: list[tuple[str, pb.SignalJobRequest]] = field(default_factory=list)
    reconfigured: list[str] = field(default_factory=list)  # nodes asked to reconfigure
    fail_launch: bool = False
    hold_launches: bool = False
    launch_gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None:
        if self.hold_launches:
            await self.launch_gate.wait()
        if self.fail_launch:
            raise NodeUnreachable(f"node {node.name} unreachable (test)")
        self.launched.append((node.name, request))

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool:
        self.signalled.append((node.name, request))
        return True

    async def reconfigure(self, node: NodeRecord) -> pb.Reconfigured:
        self.reconfigured.append(node.name)
        return pb.Reconfigured(daemon=node.name)


class InProcessController(Controller):
    """The typed client of an InProcessCluster: each call goes through ControllerApi's
    JSON path (what the gateway does), on the cluster's loop."""

    def __init__(self, harness: InProcessCluster, identity: Identity | None = None) -> None:
        self.harness = harness
        self.identity = identity or current_identity()
        self.timeout = 0.0

    def call(self, method: str, request: Any) -> Any:
        api = self.harness.api
        entry = api.methods.get(method)
        if entry is None:
            raise InvalidRequest(f"unknown method {method!r}")
        message = entry[0]()
        try:
            json_format.ParseDict(request, message)
        except json_format.ParseError as exc:
            raise InvalidRequest(f"malformed {type(message).__name__}: {exc}") from None
        # no transport, no kernel to ask: the harness vouches for the identity it was given
        with _as(api, self.identity):
            return json.loads(
                self.harness.run(api.call_json(method, message, api.identify(Caller())))
            )


class HarnessIdentity:
    """The in-process harness's authenticator (tests only; ctld's server never uses
    it): the identity the test's client was made with, set around each call."""

    def __init__(self) -> None:
        self.current: Identity | None = None

    def identify(self, caller: Caller) -> Identity:
        if self.current is None:
            raise AssertionError("an in-process call without a client identity")
        return self.current


@contextlib.contextmanager
def _as(api: ControllerApi, who: Identity) -> Iterator[None]:
    auth = api.auth
    assert isinstance(auth, HarnessIdentity)
    auth.current = who
    try:
        yield
    finally:
        auth.current = None


def make_cluster(
    config: ClusterConfig,
    store_url: str,
    *,
    clock: ManualClock | None = None,
    dispatcher: RecordingDispatcher | None = None,
) -> Cluster:
    """A loaded Cluster on ``store_url`` (open it inside a running event loop)."""
    store = Store(store_url, sqlite_synchronous="NORMAL")
    store.open()
    cluster = Cluster(
        config, store, dispatcher or RecordingDispatcher(), clock=clock or ManualClock()
    )
    cluster.load()
    return cluster


def registration(
    cluster: Cluster,
    name: str,
    *,
    cpus: int = 8,
    memory_mb: int = 16384,
    gpus: int = 8,
    gpu_model: str = DEFAULT_GPU_MODEL,
) -> pb.RegisterNodeRequest:
    """What the noded named ``name`` would send, running nothing (its address: the
    loopback one LocalCluster gives the node of that place in the config)."""
    res = pb.NodeResources(cpus=cpus, memory_mb=memory_mb)
    for g in range(gpus):
        res.gpus.add(index=g, model=gpu_model, memory_mb=81559)
    index = list(cluster.nodes).index(name)
    return pb.RegisterNodeRequest(
        name=name, address=f"127.0.0.{index + 2}:1", resources=res, version=__version__
    )


async def register_all(
    cluster: Cluster, *, cpus: int = 8, memory_mb: int = 16384, gpus: int = 8
) -> None:
    """Every node of the config registers, idle."""
    for name in cluster.nodes:
        await cluster.register_node(
            registration(cluster, name, cpus=cpus, memory_mb=memory_mb, gpus=gpus)
        )


class InProcessCluster(Harness):
    """ctld in this process, with LocalCluster's config for the same arguments."""

    def __init__(self, state_dir: Path | str, **layout: Any) -> None:
        layout.setdefault("kill_wait_s", 2.0)
        # nothing listens: a path in the state dir, not a socket directory of /tmp
        layout.setdefault("socket_path", str(Path(state_dir) / "run" / "ctld.sock"))
        self.layout = Layout(Path(state_dir), **layout)
        self.layout.write_config()
        self.config = load_config(str(self.layout.config_path))
        # the layout's store (a PostgreSQL URL in the store tests), else a SQLite file
        self.store_url = self.layout.store_url or f"sqlite:///{self.layout.state_dir / 'ctld.db'}"
        self.clock = ManualClock()
        self.dispatcher = RecordingDispatcher()
        self.loop = asyncio.new_event_loop()
        self.cluster = self._open()
        self.api = ControllerApi(self.cluster, HarnessIdentity())

    @property
    def node_names(self) -> list[str]:
        return self.layout.node_names

    def _open(self) -> Cluster:
        async def build() -> Cluster:
            return make_cluster(
                self.config, self.store_url, clock=self.clock, dispatcher=self.dispatcher
            )

        return self.run(build())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one of ctld's coroutines on the cluster's loop."""
        return self.loop.run_until_complete(coro)

    def client(self, identity: Identity | None = None) -> InProcessController:
        return InProcessController(self, identity)

    def register_nodes(self, names: list[str] | None = None) -> None:
        """Every node (or ``names``) registers as its noded would, idle."""
        for name in names or self.node_names:
            req = registration(
                self.cluster,
                name,
                cpus=self.layout.cpus_per_node,
                memory_mb=self.layout.memory_mb_per_node,
                gpus=self.layout.gpus_per_node,
                gpu_model=self.layout.gpu_model,
            )
            self.run(self.cluster.register_node(req))

    def exit(self, job_id: int | str, exit_code: int = 0, exit_signal: int = 0) -> None:
        """The job's batch node reports that its script ended (as noded would)."""
        job = self.cluster.jobs[int(job_id)]
        update = pb.JobStatusUpdate(
            job_id=job.job_id,
            kind=pb.JobStatusUpdate.KIND_EXITED,
            time=self.clock(),
            exit_code=exit_code,
            exit_signal=exit_signal,
        )
        req = pb.ReportJobStatusRequest(node=job.batch_host, updates=[update])
        self.run(self.cluster.report_status(req))

    def heartbeat(self, names: list[str] | None = None) -> None:
        """Every node (or ``names``) sends a heartbeat at the manual clock's time."""
        for name in names or self.node_names:
            self.cluster.heartbeat(pb.HeartbeatRequest(name=name))

    def tick(self, seconds: float = 0.0) -> None:
        """Move the manual clock on and run what ctld's timers do at that time: the
        heartbeat check (nodes that stopped answering) and the time limits of
        allocations, with the signals they send."""
        self.clock.advance(seconds)

        async def timers() -> None:
            await self.cluster.check_heartbeats()
            await self.cluster.enforce_allocation_limits()
            await self._drain()

        self.run(timers())

    def settle(self) -> None:
        """One scheduling pass, and every launch or signal it started."""

        async def settle() -> None:
            await self.cluster.schedule_pass()
            await self._drain()

        self.run(settle())

    async def _drain(self) -> None:
        # the launches and signals ctld runs as tasks of its own
        tasks: set[asyncio.Future[None]] = getattr(self.cluster, "_tasks", set())
        while tasks:
            await asyncio.gather(*list(tasks), return_exceptions=True)

    def restart(self) -> Cluster:
        """A new Cluster from the same store file, as after a ctld restart (the old one
        is dropped with what it held only in memory)."""
        self.run(self._drain())
        self.cluster.store.close()
        self.cluster = self._open()
        self.api = ControllerApi(self.cluster, HarnessIdentity())
        return self.cluster

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.run(self._drain())
            self.cluster.store.close()
        finally:
            self.loop.close()

    def __enter__(self) -> InProcessCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "InProcessCluster",
    "InProcessController",
    "ManualClock",
    "RecordingDispatcher",
    "make_cluster",
    "register_all",
    "registration",
]
