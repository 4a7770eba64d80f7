"""Where the config is and the defaults every program dials by: standard library
(``os``) only, so that a command finding its controller pays for nothing more."""

from __future__ import annotations

import os

DEFAULT_CONFIG_PATH = "/etc/corral/corral.toml"
CONFIG_ENV = "CORRAL_CONF"
DEFAULT_GRPC_PORT = 6917  # Slurm's slurmctld is 6817: both can share a host
DEFAULT_NODED_PORT = 6918
DEFAULT_HTTP_PORT = 6919
DEFAULT_NODE_PORT = 6920  # ctld's port for noded (mutual TLS), apart from the client port
DEFAULT_SOCKET = "/run/corral/ctld.sock"


def config_path(explicit: str | None = None) -> str:
    return explicit or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH
