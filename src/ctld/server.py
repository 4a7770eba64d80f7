"""ctld's process: store, state, scheduler, gRPC server and HTTP gateway, in one loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import time

import grpc
import structlog
from aiohttp import web
from grpc import aio

from corral.auth import CONTROLLER_CN, tls
from corral.auth.peercred import socket_address
from corral.clock import SystemClock
from corral.config import ClusterConfig
from corral.errors import CorralError
from corral.limits import NODED_MAX_RECEIVE_BYTES
from ctld import jobstate as js
from ctld.auth import ClusterAuthenticator, StepCredentials
from ctld.cluster import Cluster
from ctld.dispatch import GrpcDispatcher
from ctld.gateway import make_app
from ctld.metrics import add_metrics_route, make_registry
from ctld.rpc import ControllerApi, NodeControllerApi, add_servicers
from ctld.store import Store

log = structlog.get_logger("ctld")
PURGE_INTERVAL_S = 30.0
RETENTION_INTERVAL_S = 3600.0  # how often old jobs are purged from the store


async def serve(config: ClusterConfig, *, ready_file: str = "") -> None:
    ctl = config.controller
    os.makedirs(ctl.state_dir, mode=0o700, exist_ok=True)
    store = Store(ctl.effective_store_url, sqlite_synchronous=ctl.sqlite_synchronous)
    store.open()
    tls_dir = config.tls.dir
    dispatcher = GrpcDispatcher(tls_dir)
    cluster = Cluster(config, store, dispatcher, clock=SystemClock())
    cluster.load()
    step_credentials = StepCredentials()
    api = ControllerApi(cluster, make_authenticator(config), step_credentials)
    if not tls_dir:
        log.warning("no [tls] dir: daemons talk in plaintext and node calls are not authenticated")

    server = aio.server(options=[("grpc.max_receive_message_length", NODED_MAX_RECEIVE_BYTES)])
    nodes = NodeControllerApi(cluster, verify_nodes=bool(tls_dir), steps=step_credentials)
    add_servicers(server, api, nodes)
    grpc_addr = f"{ctl.bind_host}:{ctl.grpc_port}"
    if config.tls.clients:
        grpc_port = server.add_secure_port(grpc_addr, client_tls(tls_dir))
    else:
        grpc_port = server.add_insecure_port(grpc_addr)
    node_addr = f"{ctl.bind_host}:{ctl.node_port}"
    if tls_dir:
        node_port = server.add_secure_port(
            node_addr, tls.server_credentials(tls_dir, CONTROLLER_CN)
        )
    else:
        node_port = server.add_insecure_port(node_addr)
    if grpc_port == 0 or node_port == 0:
        raise SystemExit(f"ctld: cannot listen on {grpc_addr} and {node_addr}")
    await server.start()

    registry = make_registry(cluster)
    app = make_app(api)
    add_metrics_route(app, registry)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ssl_context = client_ssl_context(tls_dir) if config.tls.clients else None
    site = web.TCPSite(
        runner, ctl.bind_host, ctl.http_port, reuse_address=True, ssl_context=ssl_context
    )
    await site.start()
    if ctl.socket:
        await web.UnixSite(runner, prepare_socket(ctl.socket)).start()
        if not ctl.socket.startswith("@"):
            os.chmod(ctl.socket, 0o666)  # anyone may connect: the kernel says who they are
    runners = [runner]
    if ctl.metrics_port:
        metrics_app = web.Application()
        add_metrics_route(metrics_app, registry)
        metrics_runner = web.AppRunner(metrics_app, access_log=None)
        await metrics_runner.setup()
        await web.TCPSite(
            metrics_runner, ctl.bind_host, ctl.metrics_port, reuse_address=True
        ).start()
        runners.append(metrics_runner)
    log.info(
        "ctld listening",
        grpc=f"{ctl.bind_host}:{grpc_port}",
        node_port=node_port,
        socket=ctl.socket,
        auth=config.auth.type,
        tls=bool(tls_dir),
        http=f"{ctl.bind_host}:{ctl.http_port}",
        store=store.url,
        cluster=config.cluster_name,
        nodes=len(cluster.nodes),
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def retention() -> None:
        """Finished jobs older than purge_job_after leave the store (archived first)."""
        while ctl.purge_job_after_s:
            if store.available:
                try:
                    purged = await asyncio.to_thread(
                        store.purge_jobs,
                        ended_before=time.time() - ctl.purge_job_after_s,
                        finished_states=js.FINISHED,
                        archive_dir=ctl.archive_dir,
                    )
                except (CorralError, OSError) as exc:
                    log.error("job purge failed", error=str(exc))
                else:
                    if purged:
                        log.info("jobs purged", jobs=purged, archive_dir=ctl.archive_dir or None)
            await asyncio.sleep(RETENTION_INTERVAL_S)

    tasks = [
        asyncio.create_task(t)
        for t in (
            cluster.run_scheduler(),
            cluster.run_heartbeat_monitor(),
            cluster.run_purge(PURGE_INTERVAL_S),
            retention(),
        )
    ]
    if ready_file:
        with open(ready_file + ".tmp", "w") as fh:
            fh.write(f"{os.getpid()} {grpc_port} {ctl.http_port} {node_port}\n")
        os.replace(ready_file + ".tmp", ready_file)
    await stop.wait()
    log.info("ctld stopping")
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t
    for r in runners:
        await r.cleanup()
    await server.stop(grace=2)
    await dispatcher.close()
    store.close()  # drains the writer: every queued commit is made durable or failed
    if ctl.socket and not ctl.socket.startswith("@"):
        with contextlib.suppress(OSError):
            os.unlink(ctl.socket)
    log.info("ctld stopped")


def make_authenticator(config: ClusterConfig) -> ClusterAuthenticator:
    key = None
    if config.auth.jwt_key:
        from corral.auth.tokens import read_key

        key = read_key(config.auth.jwt_key)
    return ClusterAuthenticator(config.auth, key)


def prepare_socket(path: str) -> str:
    """The address to bind: a stale socket file goes, its directory is made (0755)."""
    if path.startswith("@"):
        return socket_address(path)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return path


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
