"""ctld's process: store, state, scheduler, gRPC server and HTTP gateway, in one loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import structlog
from aiohttp import web
from grpc import aio

from corral.clock import SystemClock
from corral.config import ClusterConfig
from corral.errors import CorralError
from ctld import jobstate as js
from ctld.auth import ClaimedIdentity
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
    dispatcher = GrpcDispatcher()
    cluster = Cluster(config, store, dispatcher, clock=SystemClock())
    cluster.load()
    api = ControllerApi(cluster, ClaimedIdentity())

    server = aio.server(options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)])
    add_servicers(server, api, NodeControllerApi(cluster))
    grpc_port = server.add_insecure_port(f"{ctl.bind_host}:{ctl.grpc_port}")
    if grpc_port == 0:
        raise SystemExit(f"ctld: cannot listen on {ctl.bind_host}:{ctl.grpc_port}")
    await server.start()

    registry = make_registry(cluster)
    app = make_app(api)
    add_metrics_route(app, registry)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, ctl.bind_host, ctl.http_port, reuse_address=True)
    await site.start()
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
            fh.write(f"{os.getpid()} {grpc_port} {ctl.http_port}\n")
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
    log.info("ctld stopped")
