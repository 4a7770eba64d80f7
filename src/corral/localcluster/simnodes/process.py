"""The node simulator as a process (``python -m corral.localcluster.simnodes``): the
nodes from the config, the control socket (JSON lines: crash, revive, fault, stats),
the ready file once every node registered, and a clean stop on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from corral import hostlist
from corral.config import ClusterConfig, load_config
from corral.localcluster import simnodes
from corral.localcluster.simnodes.simulator import SimulatedNodes


def nodes_from_config(
    config: ClusterConfig, names: list[str]
) -> list[tuple[str, int, int, int, str]]:
    out = []
    for name in names:
        cfg = config.node(name)
        gpus = cfg.gpus.count if cfg.gpus.backend == "fake" else 0
        out.append((name, cfg.cpus or 16, cfg.memory_mb or 64 * 1024, gpus, cfg.gpus.model))
    return out


async def _serve_control(sim: SimulatedNodes, path: str) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                try:
                    reply = sim.control(json.loads(line))
                except (ValueError, TypeError, AttributeError) as exc:
                    reply = {"ok": False, "error": f"bad command: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        writer.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return await asyncio.start_unix_server(handle, path)


async def _main(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    names = hostlist.expand(args.nodes) if args.nodes else config.node_names
    ctl = config.controller
    sim = SimulatedNodes(
        f"{ctl.host}:{ctl.grpc_port}",
        nodes_from_config(config, names),
        listen=args.listen,
        port=args.port,
        heartbeat_interval_s=args.heartbeat_interval or config.heartbeat.interval_s,
        default_runtime_s=args.default_runtime,
    )
    await sim.start()
    control = await _serve_control(sim, args.control) if args.control else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.ready_file:
        await sim.wait_registered(args.register_timeout)
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(f"{os.getpid()} {sim.address}\n")
        tmp.replace(args.ready_file)
    print(f"simnodes: {len(names)} nodes on {sim.address}", file=sys.stderr, flush=True)
    await stop.wait()
    if control is not None:
        control.close()
    await sim.stop()
    print(f"simnodes: stopped {json.dumps(sim.stats())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m corral.localcluster.simnodes", description=simnodes.__doc__
    )
    p.add_argument("-f", "--config", help="corral.toml (default: $CORRAL_CONF)")
    p.add_argument("--nodes", default="", help="hostlist of nodes to play (default: all)")
    p.add_argument("--listen", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--heartbeat-interval", type=float, default=0.0)
    p.add_argument("--default-runtime", type=float, default=1.0)
    p.add_argument("--control", default="", help="Unix socket for commands (JSON lines)")
    p.add_argument("--ready-file", default="")
    p.add_argument("--register-timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
