"""The cluster configuration: one TOML file read by ctld, every noded and the commands.

``ClusterConfig`` holds every section (each defined and checked in its own module of
this package); ``parse_config`` validates a parsed document, ``load_config`` reads the
file. docs/config.md is the reference for each key.
"""

from __future__ import annotations

import pathlib
import tomllib
from dataclasses import dataclass, field
from typing import Any

from corral.config.accounting import (
    AccountConfig,
    QosConfig,
    check_accounts,
    parse_account,
    parse_qos,
    preempt_loop,
)
from corral.config.containers import ContainersConfig, parse_containers
from corral.config.controller import (
    ControllerConfig,
    HeartbeatConfig,
    check_failover,
    parse_controller,
    parse_heartbeat,
)
from corral.config.nodes import (
    DynamicNodesConfig,
    IdleGpuConfig,
    NodeConfig,
    NodedConfig,
    parse_dynamic_nodes,
    parse_idle_gpus,
    parse_node,
    parse_noded,
)
from corral.config.paths import config_path
from corral.config.power import PowerConfig, parse_power
from corral.config.scheduling import (
    PartitionConfig,
    PriorityConfig,
    SchedulerConfig,
    parse_partition,
    parse_priority,
    parse_scheduler,
)
from corral.config.section import Section
from corral.config.security import AuthConfig, TlsConfig, parse_auth, parse_tls
from corral.config.web import WebConfig, parse_web
from corral.errors import ConfigError
from corral.mailconfig import MailConfig, parse_mail


@dataclass(frozen=True)
class ClusterConfig:
    cluster_name: str = "corral"
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    noded: NodedConfig = field(default_factory=NodedConfig)
    nodes: tuple[NodeConfig, ...] = ()
    partitions: tuple[PartitionConfig, ...] = ()
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    priority: PriorityConfig = field(default_factory=PriorityConfig)
    accounts: tuple[AccountConfig, ...] = ()
    qos: tuple[QosConfig, ...] = (QosConfig("normal"),)
    idle_gpus: IdleGpuConfig = field(default_factory=IdleGpuConfig)
    web: WebConfig = field(default_factory=WebConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    mail: MailConfig = field(default_factory=MailConfig)
    containers: ContainersConfig = field(default_factory=ContainersConfig)
    power: PowerConfig = field(default_factory=PowerConfig)
    dynamic_nodes: DynamicNodesConfig = field(default_factory=DynamicNodesConfig)
    source: str = ""

    def node(self, name: str) -> NodeConfig:
        for entry in self.nodes:
            if name in entry.names:
                return entry
        raise ConfigError(f"{self.source}: node {name!r} is not in any [[nodes]] entry")

    @property
    def node_names(self) -> list[str]:
        return [n for entry in self.nodes for n in entry.names]

    @property
    def default_partition(self) -> PartitionConfig | None:
        for p in self.partitions:
            if p.default:
                return p
        return self.partitions[0] if self.partitions else None


def parse_config(data: dict[str, Any], source: str = "<config>") -> ClusterConfig:
    """Validate a parsed TOML document into a ClusterConfig."""
    top = Section(data, "")
    cluster_name = top.get("cluster_name", str, "corral")
    controller = parse_controller(Section(top.get("controller", dict, {}), "controller"))
    heartbeat = parse_heartbeat(Section(top.get("heartbeat", dict, {}), "heartbeat"))
    check_failover(controller, heartbeat)
    noded = parse_noded(Section(top.get("noded", dict, {}), "noded"))
    raw_nodes = top.get("nodes", list, [])
    nodes = tuple(parse_node(Section(n, f"nodes[{i}]")) for i, n in enumerate(raw_nodes))
    seen: set[str] = set()
    for i, entry in enumerate(nodes):
        for n in entry.names:
            if n in seen:
                raise ConfigError(f"nodes[{i}].names: node {n!r} is listed twice")
            seen.add(n)
    raw_parts = top.get("partitions", list, [])
    partitions = tuple(
        parse_partition(Section(p, f"partitions[{i}]"), seen) for i, p in enumerate(raw_parts)
    )
    scheduler = parse_scheduler(Section(top.get("scheduler", dict, {}), "scheduler"))
    priority = parse_priority(Section(top.get("priority", dict, {}), "priority"))
    raw_accounts = top.get("accounts", list, [])
    accounts = tuple(
        parse_account(Section(a, f"accounts[{i}]")) for i, a in enumerate(raw_accounts)
    )
    check_accounts(accounts)
    raw_qos = top.get("qos", list, [])
    qos = tuple(parse_qos(Section(q, f"qos[{i}]")) for i, q in enumerate(raw_qos))
    qos_names = [q.name for q in qos]
    for i, name in enumerate(qos_names):
        if name in qos_names[:i]:
            raise ConfigError(f"qos[{i}].name: QOS {name!r} is defined twice")
    for i, q in enumerate(qos):
        for target in q.preempt:
            if target not in (*qos_names, "normal"):
                raise ConfigError(f"qos[{i}].preempt: {target!r} is not a QOS")
    loop = preempt_loop(qos)
    if loop:
        raise ConfigError(f"qos: preemption loop: {' -> '.join(loop)}")
    idle_gpus = parse_idle_gpus(Section(top.get("idle_gpus", dict, {}), "idle_gpus"))
    web = parse_web(Section(top.get("web", dict, {}), "web"))
    auth = parse_auth(Section(top.get("auth", dict, {}), "auth"))
    tls = parse_tls(Section(top.get("tls", dict, {}), "tls"))
    mail = parse_mail(Section(top.get("mail", dict, {}), "mail"))
    containers = parse_containers(Section(top.get("containers", dict, {}), "containers"))
    power = parse_power(
        Section(top.get("power", dict, {}), "power"), seen, {p.name for p in partitions}
    )
    dynamic_nodes = parse_dynamic_nodes(
        Section(top.get("dynamic_nodes", dict, {}), "dynamic_nodes"), {p.name for p in partitions}
    )
    cloud = [n for entry in nodes if entry.cloud for n in entry.names]
    if cloud and not power.resume_program:
        raise ConfigError(f"nodes: cloud node {cloud[0]!r} needs [power].resume_program")
    if not any(q.name == "normal" for q in qos):
        qos = (QosConfig("normal"), *qos)  # Slurm's default QOS always exists
    top.done()
    names = [p.name for p in partitions]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"partitions[{i}].name: partition {name!r} is defined twice")
    if sum(p.default for p in partitions) > 1:
        raise ConfigError("partitions: more than one partition has default = true")
    return ClusterConfig(
        cluster_name=cluster_name,
        controller=controller,
        heartbeat=heartbeat,
        noded=noded,
        nodes=nodes,
        partitions=partitions,
        scheduler=scheduler,
        priority=priority,
        accounts=accounts,
        qos=qos,
        idle_gpus=idle_gpus,
        web=web,
        auth=auth,
        tls=tls,
        mail=mail,
        containers=containers,
        power=power,
        dynamic_nodes=dynamic_nodes,
        source=source,
    )


def load_config(path: str | None = None) -> ClusterConfig:
    """Read and validate the cluster config (explicit path, $CORRAL_CONF, or /etc)."""
    where = config_path(path)
    try:
        raw = pathlib.Path(where).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the cluster config: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    try:
        return parse_config(data, where)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
