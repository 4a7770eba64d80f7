"""``python -m ctld`` (what ``corral ctld`` and the systemd unit run)."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import Sequence

from corral.config import ControllerHost, load_config
from corral.errors import ConfigError, CorralError
from corral.log import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral ctld", description="the corral controller")
    parser.add_argument(
        "-f", "--config", help="cluster config (default $CORRAL_CONF or /etc/corral/corral.toml)"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    parser.add_argument(
        "--log-level", default=None, help="the log level (default: controller.log_level, info)"
    )
    parser.add_argument(
        "--ready-file", default="", help="write 'pid grpc_port http_port' here once listening"
    )
    parser.add_argument(
        "--controller",
        default="",
        metavar="N|NAME",
        help="which of controller.hosts this ctld is: its position (0 first) or name "
        "(default: the one whose host is this machine's name)",
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        index = which_controller(config.controller.controllers, args.controller)
    except CorralError as exc:
        print(f"ctld: error: {exc}", file=sys.stderr)
        return exc.exit_code
    setup_logging(
        "ctld",
        json=args.log_json or config.controller.log_json,
        level=args.log_level or config.controller.log_level,
    )
    from ctld.daemon.server import serve  # grpc and the store load only once the config is good

    try:
        asyncio.run(serve(config, ready_file=args.ready_file, controller=index))
    except CorralError as exc:
        print(f"ctld: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def which_controller(controllers: Sequence[ControllerHost], wanted: str) -> int:
    """This ctld's position in controller.hosts: as asked, else by this host's names
    (as slurmctld finds itself among the SlurmctldHost lines)."""
    names = [c.name for c in controllers]
    if wanted:
        if wanted.isdecimal() and int(wanted) < len(controllers):
            return int(wanted)
        if wanted in names:
            return names.index(wanted)
        raise ConfigError(
            f"--controller {wanted}: not one of controller.hosts ({', '.join(names)})"
        )
    if len(controllers) == 1:
        return 0
    mine = {socket.gethostname(), socket.getfqdn(), socket.gethostname().split(".")[0]}
    found = [i for i, c in enumerate(controllers) if c.host in mine]
    if len(found) == 1:
        return found[0]
    raise ConfigError(
        f"controller.hosts lists {', '.join(names)}: this host ({socket.gethostname()}) is "
        f"{'several' if found else 'none'} of them; say which with --controller N|NAME"
    )


if __name__ == "__main__":
    sys.exit(main())
