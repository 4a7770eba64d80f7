"""``python -m ctld`` (what ``corral ctld`` and the systemd unit run)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from corral.config import load_config
from corral.errors import CorralError
from corral.log import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral ctld", description="the corral controller")
    parser.add_argument(
        "-f", "--config", help="cluster config (default $CORRAL_CONF or /etc/corral/corral.toml)"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--ready-file", default="", help="write 'pid grpc_port http_port' here once listening"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except CorralError as exc:
        print(f"ctld: error: {exc}", file=sys.stderr)
        return exc.exit_code
    setup_logging("ctld", json=args.log_json or config.controller.log_json, level=args.log_level)
    from ctld.server import serve  # grpc and the store load only once the config is good

    try:
        asyncio.run(serve(config, ready_file=args.ready_file))
    except CorralError as exc:
        print(f"ctld: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
