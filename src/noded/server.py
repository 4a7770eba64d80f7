"""noded's process: discover, serve NodeAgent, register and heartbeat, report."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace

import structlog
from grpc import aio

from corral.auth import tls
from corral.clock import Clock
from corral.config import ClusterConfig, GpuConfig, NodeConfig
from corral.errors import GpuError
from corral.limits import GRPC_SERVER_OPTIONS
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from noded import spool as spool_mod
from noded import steptakeover, witness
from noded.address import advertised_host as address_of
from noded.agent import ControllerLink, NodeAgentServicer
from noded.cgroups import detect
from noded.container_feature import node_features
from noded.containers.runtime import Containers
from noded.gpu import GpuBackend
from noded.guard import CONTACT_FILE
from noded.launcher import Launcher
from noded.live import LiveSampler
from noded.reconfig import NodedReconfig
from noded.resources import discover
from noded.steps import StepRunner
from noded.stream import StepStreamServer
from noded.supervisor import JobSupervisors
from noded.witness import Witness

log = structlog.get_logger("noded")


async def serve(
    config: ClusterConfig,
    name: str,
    *,
    address: str = "",
    listen: str = "",
    port: int | None = None,
    step_port: int | None = None,
    stream_port: int | None = None,
    spool_dir: str = "",
    ready_file: str = "",
    node_cfg: NodeConfig | None = None,  # a dynamic node's (noded --dynamic)
) -> None:
    node_cfg = node_cfg or config.node(name)
    # never every interface by default: the address this node is known by
    bind_host = listen or config.noded.listen or address or node_cfg.address or socket.getfqdn()
    bind_port = config.noded.port if port is None else port
    tls_dir = config.tls.dir
    spool = spool_dir or os.path.join(config.noded.spool_dir, name)
    _check_spool(spool)
    startup_faults: list[tuple[str, str]] = []
    try:
        found = discover(node_cfg, name, spool)
    except GpuError as exc:
        # the node still comes up, drained, so sinfo -R tells the operator why
        log.error("GPU discovery failed", node=name, error=str(exc))
        startup_faults.append(("GPU discovery failed: NVML error", str(exc)))
        found = discover(replace(node_cfg, gpus=GpuConfig()), name, spool)
    found.resources.features.extend(node_features(config.containers, name))
    cgroups, why = detect(config.noded.cgroups, config.noded.cgroup_root, name)
    log.info(
        "job containment",
        node=name,
        mode=cgroups.describe() if cgroups else "psutil",
        why=why or "cgroups usable",
    )

    link_ref: list[ControllerLink] = []
    containers = Containers(spool, config.containers, gpu_devices=found.devices)
    supervisors = JobSupervisors(spool)
    launcher = Launcher(
        name,
        spool,
        lambda update: link_ref[0].report(update),
        noded=config.noded,
        idle=config.idle_gpus,
        cgroups=cgroups,
        gpus=found.gpus,
        gpu_devices=found.devices,
        health=lambda reason, detail: link_ref[0].report_health(reason, detail),
        containers=containers,
        supervisors=supervisors,
    )
    server = aio.server(options=GRPC_SERVER_OPTIONS)
    steps = StepRunner(
        name,
        f"{name}:{{job_id}}:{launcher.instance}",
        lambda job_id, step_id: link_ref[0].get_step(job_id, step_id),
        lambda update: link_ref[0].report(update),
        launcher.contain_step_task,
        spool_dir=spool,
        noded=config.noded,
        idle=config.idle_gpus,
        gpus=found.gpus,
        clock=launcher.clock,
        containers=containers,
        supervisors=supervisors,
    )
    servicer = NodeAgentServicer(launcher, steps, controller_only=bool(tls_dir))
    pbg.add_NodeAgentServicer_to_server(servicer, server)
    try:
        agent_bound, bound = _add_ports(server, config, name, bind_host, bind_port, step_port)
    except RuntimeError:  # grpcio raises where older versions returned 0
        agent_bound = bound = 0
    if bound == 0 or agent_bound == 0:
        raise SystemExit(
            f"noded: cannot listen on {bind_host}:{bind_port}: "
            "a port is taken, or the address is not this host's"
        )
    await server.start()
    # srun's framed task stream: what srun uses (no grpc in its start-up); TLS where the
    # client ports have it, and always the step credential's proof first (stream.py)
    with_tls = bool(tls_dir) and config.tls.clients
    stream = StepStreamServer(steps, tls.stream_server_context(tls_dir, name) if with_tls else None)
    stream.ready.clear()  # until the steps of an earlier noded are taken over (below)
    try:
        s_port = config.noded.stream_port if stream_port is None else stream_port
        # bound now (a port taken fails the start), served once the earlier noded's
        # steps are ours: a RESUME before that would find no step, and srun end it
        stream_bound = await stream.start(bind_host, s_port, serving=False)
    except OSError as exc:
        raise SystemExit(f"noded: cannot listen on {bind_host}:{s_port}: {exc}") from None
    advertised_host, _ = address_of(address, node_cfg.address, listen or config.noded.listen)
    advertised = f"{advertised_host}:{bound}"
    stream_address = ("tls://" if with_tls else "") + f"{advertised_host}:{stream_bound}"
    ctl = config.controller
    hb = config.heartbeat
    fence_after_s = hb.timeout_s - hb.interval_s if config.noded.self_fence else 0.0
    link = ControllerLink(
        [f"{c.host}:{c.node_port}" for c in ctl.controllers],
        name,
        advertised,
        found.resources,
        launcher,
        config.heartbeat.interval_s,
        steps,
        fence_after_s=fence_after_s,
        contact_file=os.path.join(spool, CONTACT_FILE),
        reports_file=os.path.join(spool, spool_mod.REPORTS_FILE),
        tls_dir=tls_dir,
        agent_address=f"{advertised_host}:{agent_bound}" if tls_dir else "",
        stream_address=stream_address,
        clock=launcher.clock,
    )
    link_ref.append(link)
    link.witness = Witness(spool, name, hb.interval_s, tls_dir)
    servicer.witness = lambda: witness.answer(name, link.deaf_s(), link.registered.is_set())
    dynamic = name not in config.node_names  # noded --dynamic
    reconfig = NodedReconfig(config, name, launcher, steps, dynamic=dynamic)
    servicer.reconfigure = reconfig.reconfigure
    live = LiveSampler(launcher, steps, found.gpus)
    live.gpu_indices = [d.index for d in found.devices]
    link.live = live.collect
    # an earlier noded's jobs are taken over, or settled (killed, reported lost), before
    # ctld hears of us
    took = await launcher.recover()
    resume_wait_s = max(steptakeover.RESUME_WAIT_S, 2 * config.heartbeat.timeout_s)
    for step in took.steps:  # their sruns reopen their streams (RESUME)
        steptakeover.take_over(steps, step, resume_wait_s)
    stream.ready.set()
    link.took_over = not (took.lost_jobs or took.lost_steps)
    await stream.serve()  # srun's RESUME finds its step now (it retried until here)
    _start_guard(spool, name, launcher.instance, fence_after_s)
    for reason, detail in startup_faults:
        link.report_health(reason, detail)
    log.info("noded listening", node=name, address=advertised, spool=spool)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    hangups: set[asyncio.Task[pb.Reconfigured]] = set()

    def hangup() -> None:  # SIGHUP: read the config file again (noded/reconfig.py)
        task = asyncio.create_task(reconfig.reconfigure("SIGHUP"))
        hangups.add(task)
        task.add_done_callback(hangups.discard)

    loop.add_signal_handler(signal.SIGHUP, hangup)
    tasks = [
        asyncio.create_task(link.run_heartbeats()),
        asyncio.create_task(link.run_outbox()),
        asyncio.create_task(link.run_self_fence()),
        asyncio.create_task(launcher.run_monitor()),
        asyncio.create_task(steps.run_monitor()),
        asyncio.create_task(
            _watch_gpus(
                found.gpus,
                link,
                lambda: reconfig.config.noded.health_interval_s,
                live,
                launcher.clock,
            )
        ),
    ]
    if ready_file:
        await link.registered.wait()
        with open(ready_file + ".tmp", "w") as fh:
            agent = link.agent_address or advertised
            fh.write(f"{os.getpid()} {advertised} {agent} {stream_address}\n")
        os.replace(ready_file + ".tmp", ready_file)
    await stop.wait()
    # the jobs run on (their supervisors keep them): a new noded takes them over, as
    # slurmd leaves its slurmstepds; the guard goes on fencing while none is here
    log.info(
        "noded stopping: its jobs run on",
        node=name,
        running=len(launcher.jobs),
        steps=len(steps.steps),
    )
    steps.detach()  # a step's stream closing now is no reason to kill its tasks
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t
    await stream.close()
    await server.stop(grace=1)
    # what ctld has not acknowledged yet stays in the spool for the next noded
    await link.close()
    supervisors.detach_all()
    found.gpus.close()
    if cgroups is not None:
        cgroups.close()
    log.info("noded stopped", node=name)


def _check_spool(spool: str) -> None:
    """Root writes in the spool: it must be root's alone (spool.check_private)."""
    os.makedirs(spool, mode=0o755, exist_ok=True)
    why = spool_mod.check_private(spool) if os.geteuid() == 0 else ""
    if why:
        raise SystemExit(f"noded: error: unsafe spool directory: {why}")


def _start_guard(
    spool: str, name: str, instance: str, fence_after_s: float
) -> subprocess.Popen[bytes] | None:
    """The fence guard (noded/guard.py): it outlives this process if it is killed."""
    if fence_after_s <= 0:
        return None
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "noded.guard",
            spool,
            name,
            instance,
            str(fence_after_s),
            str(os.getpid()),
        ],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a signal to noded's group is not the guard's
    )


async def _watch_gpus(
    gpus: GpuBackend,
    link: ControllerLink,
    interval_s: Callable[[], float],
    live: LiveSampler,
    clock: Clock,
) -> None:
    """Poll GPU health (every ``interval_s()`` of the clock: a reconfigure changes it);
    each new fault (XID, ECC, lost GPU) drains the node."""
    while True:
        await clock.sleep(interval_s())
        for event in gpus.poll_health():
            live.fault(event)
            link.report_health(event.reason(), f"{event.kind}: {event.detail}")


def _add_ports(
    server: aio.Server,
    config: ClusterConfig,
    name: str,
    bind_host: str,
    bind_port: int,
    step_port: int | None,
) -> tuple[int, int]:
    """The agent port and the step port (one port without TLS)."""
    tls_dir = config.tls.dir
    if not tls_dir:
        log.warning("no [tls] dir: NodeAgent calls are not authenticated", node=name)
        bound = server.add_insecure_port(f"{bind_host}:{bind_port}")
        return bound, bound
    # two ports: the agent port takes only peers with a cluster certificate (ctld);
    # gRPC clients without one reach RunTasks on the step port, over TLS too: its
    # request carries the step's credential itself, which must not cross in clear
    tls.watch_revocations(tls_dir)  # a revoked controller certificate is refused
    agent_bound = server.add_secure_port(
        f"{bind_host}:{bind_port}", tls.server_credentials(tls_dir, name)
    )
    s_port = config.noded.step_port if step_port is None else step_port
    bound = server.add_secure_port(
        f"{bind_host}:{s_port}", tls.step_server_credentials(tls_dir, name)
    )
    return agent_bound, bound
