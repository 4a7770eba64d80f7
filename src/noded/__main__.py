"""``python -m noded`` (what ``corral noded`` and the systemd unit run)."""

from __future__ import annotations

import os

# noded forks job processes from a process full of gRPC threads; gRPC's fork handlers
# then run in the child and can abort it (seen: SIGABRT before exec). Jobs never use
# gRPC from the forked child, so the handlers are turned off before gRPC loads.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import argparse
import asyncio
import socket
import sys

from corral.config import load_config
from corral.errors import CorralError
from corral.log import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral noded", description="the corral node agent")
    parser.add_argument(
        "-f", "--config", help="cluster config (default $CORRAL_CONF or /etc/corral/corral.toml)"
    )
    parser.add_argument("-N", "--name", default="", help="node name (default: short hostname)")
    parser.add_argument(
        "--address",
        default="",
        help="host ctld should dial (default: the listen address or this host's name)",
    )
    parser.add_argument("--listen", default="", help="bind address (default noded.listen)")
    parser.add_argument("--port", type=int, default=None, help="agent port (0: any free)")
    parser.add_argument(
        "--step-port", type=int, default=None, help="srun's port with TLS (0: any free)"
    )
    parser.add_argument(
        "--stream-port", type=int, default=None, help="srun's task stream (0: any free)"
    )
    parser.add_argument(
        "--spool-dir", default="", help="per-job scripts (default noded.spool_dir/NAME)"
    )
    parser.add_argument("--log-json", action="store_true")
    parser.add_argument(
        "--log-level", default=None, help="the log level (default: noded.log_level, info)"
    )
    parser.add_argument("--ready-file", default="")
    parser.add_argument(
        "-Z",
        "--dynamic",
        action="store_true",
        help="a dynamic node (Slurm's slurmd -Z): not in the config, registers with its "
        "node certificate and what it discovers ([dynamic_nodes] must allow it)",
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        name = args.name or socket.gethostname().split(".")[0]
        known = name in config.node_names
        if args.dynamic and known:
            raise CorralError(f"node {name!r} is in the config: it cannot be dynamic")
        node = config.dynamic_nodes.node_config(name) if args.dynamic else config.node(name)
    except CorralError as exc:
        print(f"noded: error: {exc}", file=sys.stderr)
        return exc.exit_code
    from noded.address import advertised_host, loopback_problem

    host, given = advertised_host(args.address, node.address, args.listen or config.noded.listen)
    problem = loopback_problem(host, [c.host for c in config.controller.controllers])
    if problem and not given:  # a guess that cannot work: say so, never run unreachable
        print(f"noded: error: {problem}", file=sys.stderr)
        return 1
    if problem:  # the operator chose it: maybe a tunnel; say what it costs
        print(f"noded: warning: {problem}", file=sys.stderr)
    setup_logging(
        "noded",
        json=args.log_json or config.noded.log_json,
        level=args.log_level or config.noded.log_level,
    )
    from noded.server import serve

    asyncio.run(
        serve(
            config,
            name,
            address=args.address,
            listen=args.listen,
            port=args.port,
            step_port=args.step_port,
            stream_port=args.stream_port,
            spool_dir=args.spool_dir,
            ready_file=args.ready_file,
            node_cfg=node,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
