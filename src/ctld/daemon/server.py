"""ctld's process: store, state, scheduler, gRPC server and HTTP gateway, in one loop."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc
import sqlalchemy as sa
import structlog
from aiohttp import web
from grpc import aio
from prometheus_client import CollectorRegistry

from corral.auth import CONTROLLER_CN, tls
from corral.clock import SystemClock
from corral.config import ClusterConfig
from corral.errors import ConfigError, CorralError
from corral.limits import GRPC_SERVER_OPTIONS
from corral.wire.methods import CONTROLLER, NODE_CONTROLLER
from ctld import web as web_page
from ctld.api import standby
from ctld.api.auth import ClusterAuthenticator, StepCredentials
from ctld.api.gateway import make_app
from ctld.api.grpc_service import service_handler
from ctld.api.rpc import ControllerApi, NodeControllerApi
from ctld.api.standby import Switch
from ctld.api.unproven import Guard, GuardedSite
from ctld.control.cluster import Cluster
from ctld.control.reconfig import ROOT
from ctld.daemon.dispatch import GrpcDispatcher
from ctld.daemon.preflight import check_auth, check_metrics
from ctld.daemon.sockdir import prepare
from ctld.model import jobstate as js
from ctld.storage import storelock
from ctld.storage.lease import Holder, Lease, keep
from ctld.storage.store import Store, normalize_url
from ctld.telemetry.metrics import ClusterCollector, add_metrics_route
from ctld.telemetry.metrics_access import MetricsAccess

log = structlog.get_logger("ctld")
PURGE_INTERVAL_S = 30.0
RETENTION_INTERVAL_S = 3600.0  # how often old jobs are purged from the store
KEEPALIVE_S = 75.0  # an idle gateway connection is closed after this (aiohttp's: an hour)


async def serve(config: ClusterConfig, *, ready_file: str = "", controller: int = 0) -> None:
    """Run controller ``controller`` of ``controller.hosts`` (the only one without them)
    until SIGTERM/SIGINT. With a standby configured it is primary only while it holds
    the lease (ctld.storage.lease); otherwise it waits as a standby, and returns to that when
    another controller deposes it."""
    config = replace(config, controller=config.controller.as_controller(controller))
    ctl = config.controller
    me = ctl.controllers[controller].name
    if ctl.failover and not normalize_url(ctl.effective_store_url).startswith("postgresql"):
        raise ConfigError(
            f"controller.hosts lists {len(ctl.hosts)} controllers, but failover needs the "
            f'store on PostgreSQL (store_url = "postgresql://..."); the store is '
            f"{ctl.effective_store_url}: SQLite is one file on one host, a standby cannot "
            "share it. Failover is not offered on SQLite: list one controller, or move "
            "the store to PostgreSQL"
        )
    for warning in check_auth(config) + check_metrics(config):  # ConfigError: no start
        log.warning(warning)
    os.makedirs(ctl.state_dir, mode=0o700, exist_ok=True)
    # a SQLite store is this process's alone while it runs (ctld.storage.storelock)
    database = storelock.sqlite_file(sa.engine.make_url(normalize_url(ctl.effective_store_url)))
    held = storelock.FileHold(database, "ctld") if database else None
    try:
        await _serve(config, me, ready_file, controller)
    finally:
        if held is not None:
            held.release()


async def _serve(config: ClusterConfig, me: str, ready_file: str, controller: int) -> None:
    ctl = config.controller
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    lease: Lease | None = None
    if ctl.failover:
        engine = Store.make_engine(normalize_url(ctl.effective_store_url), ctl.sqlite_synchronous)
        lease = Lease(engine, me, ctl.lease_s)
        switch = Switch(lambda: standby.refusal(me, lease.last if lease else Holder("", 0, 0)))
    else:
        switch = Switch(lambda: f"{me}: ctld is starting (loading its state from the store)")
    registry = CollectorRegistry(auto_describe=False)
    listening = await _listen(config, switch, registry)
    loop.add_signal_handler(signal.SIGHUP, lambda: _hangup(switch))
    try:
        if lease is None:
            await run_primary(
                config,
                stop,
                switch,
                registry,
                ready=_ready(ready_file, listening),
                controller=controller,
            )
        else:
            log.info("ctld starting as a standby", me=me, lease_s=ctl.lease_s)
            _ready(ready_file, listening)()
            await _run_failover(config, stop, switch, registry, lease, controller)
    finally:
        await listening.close()
        if lease is not None:
            lease.engine.dispose()


async def _run_failover(
    config: ClusterConfig,
    stop: asyncio.Event,
    switch: Switch,
    registry: CollectorRegistry,
    lease: Lease,
    controller: int,
) -> None:
    """Standby until the lease is ours, primary until it is lost, and again (ctld.storage.lease)."""
    poll_s = max(0.05, lease.lease_s / 5)
    while not stop.is_set():
        taken = False
        while not stop.is_set() and not taken:
            try:
                await asyncio.to_thread(lease.ensure)
                taken = await asyncio.to_thread(lease.try_acquire)
            except sa.exc.SQLAlchemyError as exc:
                log.error("lease: the store does not answer", error=str(exc).splitlines()[0])
            if not taken:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), poll_s)
        if not taken:
            return
        why: list[str] = []
        lost = asyncio.Event()

        def on_lost(reason: str, why: list[str] = why, lost: asyncio.Event = lost) -> None:
            if not lost.is_set():
                why.append(reason)
                lost.set()

        lease.on_lost = _threadsafe(asyncio.get_running_loop(), on_lost)
        keeper = asyncio.create_task(keep(lease, on_lost))
        try:
            await run_primary(
                config, stop, switch, registry, lease=lease, lost=lost, controller=controller
            )
        except BaseException:  # cannot serve (a store it cannot open): let another try
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                await asyncio.to_thread(lease.release)
            raise
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if stop.is_set():
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                await asyncio.to_thread(lease.release)
            return
        log.error("stepping down to standby", me=lease.me, reason=why[0] if why else "lease lost")
        lease.token = 0


def _threadsafe(
    loop: asyncio.AbstractEventLoop, fn: Callable[[str], None]
) -> Callable[[str], None]:
    """``fn`` called from another thread (the store's writer), run on ``loop``."""

    def call(reason: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: ctld is stopping
            loop.call_soon_threadsafe(fn, reason)

    return call


@dataclass
class _Listening:
    """ctld's ports: gRPC (clients and nodes) and the HTTP gateway, for its whole life."""

    server: aio.Server
    runners: list[web.AppRunner]
    grpc_port: int
    http_port: int
    node_port: int
    socket: str

    async def close(self) -> None:
        for r in self.runners:
            await r.cleanup()
        await self.server.stop(grace=2)
        if self.socket and not self.socket.startswith("@"):
            with contextlib.suppress(OSError):
                os.unlink(self.socket)


async def _listen(config: ClusterConfig, switch: Switch, registry: CollectorRegistry) -> _Listening:
    ctl = config.controller
    tls_dir = config.tls.dir
    # first: a socket directory another user could write refuses the start (sockdir)
    socket_address = prepare(ctl.socket) if ctl.socket else ""
    server = aio.server(options=GRPC_SERVER_OPTIONS)
    server.add_generic_rpc_handlers(
        (
            service_handler(CONTROLLER, switch.call),
            service_handler(NODE_CONTROLLER, switch.call_nodes),
        )
    )
    grpc_addr = f"{ctl.bind_host}:{ctl.grpc_port}"
    node_addr = f"{ctl.bind_host}:{ctl.node_port}"
    try:
        if config.tls.clients:
            grpc_port = server.add_secure_port(grpc_addr, client_tls(tls_dir))
        else:
            grpc_port = server.add_insecure_port(grpc_addr)
        if tls_dir:
            tls.watch_revocations(tls_dir)  # a revoked node certificate is no certificate
            node_port = server.add_secure_port(
                node_addr, tls.server_credentials(tls_dir, CONTROLLER_CN)
            )
        else:
            node_port = server.add_insecure_port(node_addr)
    except RuntimeError:  # grpcio raises where older versions returned 0
        grpc_port = node_port = 0
    if grpc_port == 0 or node_port == 0:
        raise SystemExit(
            f"ctld: cannot listen on {grpc_addr} and {node_addr}: "
            "a port is taken, or the address is not this host's"
        )
    await server.start()

    guard = Guard()  # TCP connections before a request on them authenticated
    app = make_app(switch, guard)
    access = MetricsAccess(config)  # /metrics: the bearer token of metrics_token_file
    add_metrics_route(app, registry, access, guard)
    page = web_page.mount(app, switch, config, guard)  # the web page (docs/web.md)
    switch.web_login = page.issue_login if page is not None else None
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S)
    await runner.setup()
    ssl_context = client_ssl_context(tls_dir) if config.tls.clients else None
    site = GuardedSite(runner, ctl.bind_host, ctl.http_port, guard, ssl_context)
    try:
        await site.start()
    except OSError as exc:
        raise SystemExit(
            f"ctld: cannot listen on {ctl.bind_host}:{ctl.http_port}: {exc.strerror or exc}"
        ) from None
    if ctl.socket:
        await web.UnixSite(runner, socket_address).start()
        if not ctl.socket.startswith("@"):
            os.chmod(ctl.socket, 0o666)  # anyone may connect: the kernel says who they are
    runners = [runner]
    if ctl.metrics_port:  # the same token, TLS and bound on unproven connections
        metrics_app = web.Application()
        metrics_guard = Guard()
        add_metrics_route(metrics_app, registry, access, metrics_guard)
        metrics_runner = web.AppRunner(metrics_app, access_log=None, keepalive_timeout=KEEPALIVE_S)
        await metrics_runner.setup()
        runners.append(metrics_runner)
        metrics_site = GuardedSite(
            metrics_runner, ctl.bind_host, ctl.metrics_port, metrics_guard, ssl_context
        )
        try:
            await metrics_site.start()
        except OSError as exc:
            raise SystemExit(
                f"ctld: cannot listen on {ctl.bind_host}:{ctl.metrics_port}: {exc.strerror or exc}"
            ) from None
    log.info(
        "ctld listening",
        grpc=f"{ctl.bind_host}:{grpc_port}",
        node_port=node_port,
        socket=ctl.socket,
        auth=config.auth.type,
        tls=bool(tls_dir),
        http=f"{ctl.bind_host}:{ctl.http_port}",
        cluster=config.cluster_name,
    )
    return _Listening(server, runners, grpc_port, ctl.http_port, node_port, ctl.socket)


def _ready(ready_file: str, listening: _Listening) -> Callable[[], None]:
    """Write 'pid grpc_port http_port node_port' to ``ready_file``: ctld answers."""

    def write() -> None:
        if ready_file:
            with open(ready_file + ".tmp", "w") as fh:
                fh.write(
                    f"{os.getpid()} {listening.grpc_port} {listening.http_port} "
                    f"{listening.node_port}\n"
                )
            os.replace(ready_file + ".tmp", ready_file)

    return write


async def run_primary(
    config: ClusterConfig,
    stop: asyncio.Event,
    switch: Switch,
    registry: CollectorRegistry,
    *,
    lease: Lease | None = None,
    lost: asyncio.Event | None = None,
    ready: Callable[[], None] = lambda: None,
    controller: int = 0,
) -> None:
    """The controller in charge: rebuild the state from the store (as after a restart),
    answer, schedule; until ``stop``, or ``lost`` (another controller has the lease)."""
    ctl = config.controller
    store = Store(
        ctl.effective_store_url,
        sqlite_synchronous=ctl.sqlite_synchronous,
        fence=lease.check if lease is not None else None,
    )
    await asyncio.to_thread(store.open)
    tls_dir = config.tls.dir
    dispatcher = GrpcDispatcher(tls_dir)
    cluster = Cluster(config, store, dispatcher, clock=SystemClock())
    cluster.reconfigurer.controller_index = controller  # the file is read as it sees it
    await asyncio.to_thread(cluster.load)
    step_credentials = StepCredentials(step_key(tls_dir))
    api = ControllerApi(cluster, make_authenticator(config), step_credentials)
    api.web_login = switch.web_login
    if not tls_dir:
        log.warning("no [tls] dir: daemons talk in plaintext and node calls are not authenticated")
    nodes = NodeControllerApi(cluster, verify_nodes=bool(tls_dir), steps=step_credentials)
    collector = ClusterCollector(cluster)
    registry.register(collector)
    switch.serve(api, nodes)
    log.info(
        "ctld serving as the primary",
        store=store.url,
        nodes=len(cluster.nodes),
        me=lease.me if lease is not None else None,
        lease_token=lease.token if lease is not None else None,
    )

    async def retention() -> None:
        """Finished jobs older than purge_job_after leave the store (archived first);
        the keys as they are at each round (a reconfigure changes them)."""
        while True:
            keys = cluster.config.controller
            if keys.purge_job_after_s and store.available:
                try:
                    purged = await asyncio.to_thread(
                        store.purge_jobs,
                        ended_before=cluster.clock() - keys.purge_job_after_s,
                        finished_states=js.FINISHED,
                        archive_dir=keys.archive_dir,
                    )
                except (CorralError, OSError) as exc:
                    log.error("job purge failed", error=str(exc))
                else:
                    if purged:
                        log.info("jobs purged", jobs=purged, archive_dir=keys.archive_dir or None)
            await cluster.clock.sleep(RETENTION_INTERVAL_S)

    tasks = [
        asyncio.create_task(t)
        for t in (
            cluster.run_scheduler(),
            cluster.run_heartbeat_monitor(),
            cluster.run_power(),
            cluster.run_purge(PURGE_INTERVAL_S),
            cluster.run_mail(),
            retention(),
        )
    ]
    ready()
    waits = [asyncio.create_task(stop.wait())]
    if lost is not None:
        waits.append(asyncio.create_task(lost.wait()))
    _done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in pending:
        w.cancel()
    log.info("ctld stopping" if stop.is_set() else "ctld deposed: stopping as the primary")
    switch.serve(None, None)  # calls from now on are refused as a standby's
    registry.unregister(collector)
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t
    await dispatcher.close()
    await asyncio.to_thread(store.close)  # drains the writer: every queued commit durable or failed
    log.info("ctld stopped" if stop.is_set() else "ctld is a standby again")


def _hangup(switch: Switch) -> None:
    """SIGHUP: what scontrol reconfigure does (its outcome, or why not, is logged). A
    standby has nothing to apply it to (it holds no state until it takes over)."""
    if switch.api is None:
        log.warning("SIGHUP ignored: this ctld is not the primary")
        return
    cluster = switch.api.cluster

    async def reconfigure() -> None:
        with contextlib.suppress(CorralError):  # refused: logged with the reason
            await cluster.reconfigure(ROOT, source="SIGHUP")

    cluster.state.spawn(reconfigure())


def step_key(tls_dir: str) -> bytes | None:
    """The step credentials' key: derived from ctld's private key when there is one, so
    every controller of the list issues the same credentials (a step created just
    before a failover still runs); else a random key of this process."""
    if not tls_dir:
        return None
    try:
        with open(os.path.join(tls_dir, "ctld.key"), "rb") as fh:
            secret = fh.read()
    except OSError:
        return None
    return hashlib.sha256(b"corral step credentials\0" + secret).digest()


def make_authenticator(config: ClusterConfig) -> ClusterAuthenticator:
    key = None
    if config.auth.jwt_key:
        from corral.auth.tokens import read_key

        key = read_key(config.auth.jwt_key)
    return ClusterAuthenticator(config.auth, key)


def client_tls(tls_dir: str) -> grpc.ServerCredentials:
    """Server-only TLS for client ports: clients check ctld, they have no certificate."""
    with (
        open(os.path.join(tls_dir, "ctld.key"), "rb") as k,
        open(os.path.join(tls_dir, "ctld.crt"), "rb") as c,
    ):
        return grpc.ssl_server_credentials([(k.read(), c.read())])


def client_ssl_context(tls_dir: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(os.path.join(tls_dir, "ctld.crt"), os.path.join(tls_dir, "ctld.key"))
    return ctx
