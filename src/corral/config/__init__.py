"""The cluster configuration: one TOML file read by ctld, every noded and the commands.

One module per group of sections: ``controller`` ([controller], [heartbeat]),
``nodes`` ([noded], [[nodes]], [idle_gpus]), ``security`` ([auth], [tls]),
``scheduling`` ([[partitions]], [scheduler], [priority]), ``accounting`` ([[accounts]],
[[qos]]), ``containers`` ([containers]), ``web`` ([web]; [mail] is
corral/mailconfig.py), ``section`` (the typed, checked access every parser uses),
``cluster`` (``ClusterConfig``, ``parse_config``, ``load_config``) and ``paths``
(where the file is, the default ports and socket).

Every name is importable from here as before (``from corral.config import
load_config``), loaded on first use: a command that only needs ``config_path`` or a
default port (corral/rest.py, finding its controller) loads ``paths`` (``os`` only)
and none of the dataclasses and parsers.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself costs milliseconds at a command's start-up
if TYPE_CHECKING:
    from typing import Any

    from corral.config.accounting import (
        PREEMPT_MODES,
        TRES_NAMES,
        AccountConfig,
        QosConfig,
        preempt_loop,
    )
    from corral.config.cluster import ClusterConfig, load_config, parse_config
    from corral.config.containers import CONTAINER_FEATURE, ContainersConfig
    from corral.config.controller import (
        ENFORCE,
        PRIVATE_DATA,
        ControllerConfig,
        ControllerHost,
        HeartbeatConfig,
    )
    from corral.config.nodes import GpuConfig, IdleGpuConfig, NodeConfig, NodedConfig
    from corral.config.paths import (
        CONFIG_ENV,
        DEFAULT_CONFIG_PATH,
        DEFAULT_GRPC_PORT,
        DEFAULT_HTTP_PORT,
        DEFAULT_NODE_PORT,
        DEFAULT_NODED_PORT,
        DEFAULT_SOCKET,
        config_path,
    )
    from corral.config.scheduling import PartitionConfig, PriorityConfig, SchedulerConfig
    from corral.config.security import AUTH_TYPES, AuthConfig, TlsConfig
    from corral.config.web import WebConfig
    from corral.mailconfig import MailConfig

# each name and the module that defines it (tests/unit/test_config_package.py checks
# this table against the imports above)
_WHERE = {
    "PREEMPT_MODES": "corral.config.accounting",
    "TRES_NAMES": "corral.config.accounting",
    "AccountConfig": "corral.config.accounting",
    "QosConfig": "corral.config.accounting",
    "preempt_loop": "corral.config.accounting",
    "ClusterConfig": "corral.config.cluster",
    "load_config": "corral.config.cluster",
    "parse_config": "corral.config.cluster",
    "CONTAINER_FEATURE": "corral.config.containers",
    "ContainersConfig": "corral.config.containers",
    "ENFORCE": "corral.config.controller",
    "PRIVATE_DATA": "corral.config.controller",
    "ControllerConfig": "corral.config.controller",
    "ControllerHost": "corral.config.controller",
    "HeartbeatConfig": "corral.config.controller",
    "GpuConfig": "corral.config.nodes",
    "IdleGpuConfig": "corral.config.nodes",
    "NodeConfig": "corral.config.nodes",
    "NodedConfig": "corral.config.nodes",
    "CONFIG_ENV": "corral.config.paths",
    "DEFAULT_CONFIG_PATH": "corral.config.paths",
    "DEFAULT_GRPC_PORT": "corral.config.paths",
    "DEFAULT_HTTP_PORT": "corral.config.paths",
    "DEFAULT_NODE_PORT": "corral.config.paths",
    "DEFAULT_NODED_PORT": "corral.config.paths",
    "DEFAULT_SOCKET": "corral.config.paths",
    "config_path": "corral.config.paths",
    "PartitionConfig": "corral.config.scheduling",
    "PriorityConfig": "corral.config.scheduling",
    "SchedulerConfig": "corral.config.scheduling",
    "AUTH_TYPES": "corral.config.security",
    "AuthConfig": "corral.config.security",
    "TlsConfig": "corral.config.security",
    "WebConfig": "corral.config.web",
    "MailConfig": "corral.mailconfig",
}

__all__ = [
    "AUTH_TYPES",
    "CONFIG_ENV",
    "CONTAINER_FEATURE",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_NODED_PORT",
    "DEFAULT_NODE_PORT",
    "DEFAULT_SOCKET",
    "ENFORCE",
    "PREEMPT_MODES",
    "PRIVATE_DATA",
    "TRES_NAMES",
    "AccountConfig",
    "AuthConfig",
    "ClusterConfig",
    "ContainersConfig",
    "ControllerConfig",
    "ControllerHost",
    "GpuConfig",
    "HeartbeatConfig",
    "IdleGpuConfig",
    "MailConfig",
    "NodeConfig",
    "NodedConfig",
    "PartitionConfig",
    "PriorityConfig",
    "QosConfig",
    "SchedulerConfig",
    "TlsConfig",
    "WebConfig",
    "config_path",
    "load_config",
    "parse_config",
    "preempt_loop",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.config' has no attribute {name!r}")
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value  # the next look-up is a plain one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
