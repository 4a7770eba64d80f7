"""``[controller]`` (with ``controller.hosts``: the controllers of a failover pair) and
``[heartbeat]``, and the check that binds them (a standby takes over before nodes fence)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from corral.config.paths import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_NODE_PORT,
    DEFAULT_SOCKET,
)
from corral.config.section import Section
from corral.errors import ConfigError
from corral.loglevels import level_of

PRIVATE_DATA = ("jobs", "accounting", "cloud")
# Slurm's AccountingStorageEnforce values corral knows (docs/config.md)
ENFORCE = ("associations", "limits", "qos")


@dataclass(frozen=True)
class ControllerHost:
    """One controller of ``controller.hosts`` (Slurm's SlurmctldHost lines), in order:
    where it listens and where the daemons and commands dial it."""

    host: str
    listen: str = ""
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    node_port: int = DEFAULT_NODE_PORT
    socket: str = DEFAULT_SOCKET
    name: str = ""  # what scontrol ping and the lease call it (default: host, or host:port)


@dataclass(frozen=True)
class ControllerConfig:
    host: str = "127.0.0.1"  # address the daemons and commands dial
    listen: str = ""  # address ctld binds; empty: same as host
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    node_port: int = DEFAULT_NODE_PORT  # NodeController, for noded (mutual TLS)
    socket: str = DEFAULT_SOCKET  # Unix socket of the gateway ("@name": abstract); "": none
    # the user ctld runs as (Slurm's SlurmUser): commands trust a socket served by root,
    # by themselves or by this user ("": root)
    user: str = ""
    metrics_port: int = 0  # 0: /metrics only on http_port
    # the bearer token Prometheus sends for /metrics (a file of ctld's user alone); "":
    # every scrape is refused (docs/admin-guide.md, "Metrics")
    metrics_token_file: str = ""
    state_dir: str = "/var/lib/corral"
    store_url: str = ""  # empty: sqlite:///<state_dir>/corral.db
    sqlite_synchronous: str = "FULL"  # FULL survives power loss; NORMAL only process crash
    operators: tuple[str, ...] = ("root",)
    administrators: tuple[str, ...] = ("root",)
    # "jobs", "accounting": hide other users' jobs; "cloud": show powered-down cloud nodes
    private_data: tuple[str, ...] = ()
    kill_wait_s: float = 30.0
    min_job_age_s: float = 300.0  # finished jobs stay visible to squeue this long
    purge_job_after_s: int = 0  # finished jobs leave the store after this; 0: never
    archive_dir: str = ""  # purged jobs are appended here (JSON lines) first; "": not kept
    sched_interval_s: float = 5.0  # periodic pass besides event-driven wake-ups
    log_json: bool = False
    log_level: str = "info"  # Slurm's SlurmctldDebug (--log-level wins at start)
    job_requeue: bool = True  # Slurm's JobRequeue: a node failure requeues jobs by default
    requeue_delay_s: float = 0.0  # a requeued job waits this long (reason BeginTime)
    # a batch job's checkpoint directory (noded.checkpoint_dir/<id>) is removed by its
    # batch host once the job has ended for good (docs/reliability.md)
    checkpoint_cleanup: bool = True
    # a drain (or a maintenance reservation) warns checkpointing jobs this long before it
    # stops them to requeue them (docs/reliability.md)
    disruption_lead_s: float = 120.0
    # a shrunk elastic job is offered its larger shape when nodes free up (and no job
    # waits for them): warned as for a drain, requeued bigger once it saved
    elastic_grow: bool = False
    # Slurm's AccountingStorageEnforce: "limits" (sacctmgr's limits hold or refuse jobs;
    # implies "associations", as in Slurm), "qos" (a job's QOS must be one its
    # association may use), "associations" (once the database has accounts or users, a
    # user without an association for the job's account is refused)
    accounting_enforce: tuple[str, ...] = ("associations", "limits", "qos")
    # every controller, in order (Slurm's SlurmctldHost list); empty: just the one above
    hosts: tuple[ControllerHost, ...] = ()
    lease_s: float = 20.0  # a standby takes over once the primary's lease is this stale

    @property
    def controllers(self) -> tuple[ControllerHost, ...]:
        """Every controller in order; one (this table's own address) without ``hosts``."""
        if self.hosts:
            return self.hosts
        return (
            ControllerHost(
                host=self.host,
                listen=self.listen,
                grpc_port=self.grpc_port,
                http_port=self.http_port,
                node_port=self.node_port,
                socket=self.socket,
                name=self.host,
            ),
        )

    @property
    def failover(self) -> bool:
        """A standby is configured: the controllers share a lease in the store."""
        return len(self.hosts) > 1

    def as_controller(self, index: int) -> ControllerConfig:
        """This table as controller ``index`` of ``hosts`` sees it (its own address)."""
        entry = self.controllers[index]
        return replace(
            self,
            host=entry.host,
            listen=entry.listen,
            grpc_port=entry.grpc_port,
            http_port=entry.http_port,
            node_port=entry.node_port,
            socket=entry.socket,
        )

    @property
    def bind_host(self) -> str:
        return self.listen or self.host

    @property
    def effective_store_url(self) -> str:
        return self.store_url or f"sqlite:///{self.state_dir}/corral.db"


@dataclass(frozen=True)
class HeartbeatConfig:
    interval_s: float = 10.0
    timeout_s: float = 60.0
    # this share of the nodes silent at once is ctld's own outage, not theirs: no node is
    # declared DOWN, and nodes keep their jobs (ctld/fleet/liveness.py; 0: off, as before)
    hold_fraction: float = 0.55


def parse_controller(sec: Section) -> ControllerConfig:
    d = ControllerConfig()
    synchronous = sec.get("sqlite_synchronous", str, d.sqlite_synchronous).upper()
    if synchronous not in ("FULL", "NORMAL", "EXTRA"):
        raise ConfigError(f"{sec.key('sqlite_synchronous')}: must be FULL, NORMAL or EXTRA")
    cfg = ControllerConfig(
        host=sec.get("host", str, d.host),
        listen=sec.get("listen", str, d.listen),
        grpc_port=sec.port("grpc_port", d.grpc_port),
        http_port=sec.port("http_port", d.http_port),
        node_port=sec.port("node_port", d.node_port),
        socket=sec.get("socket", str, d.socket),
        user=sec.get("user", str, d.user),
        metrics_port=sec.port("metrics_port", 0),
        metrics_token_file=sec.get("metrics_token_file", str, d.metrics_token_file),
        state_dir=sec.get("state_dir", str, d.state_dir),
        store_url=sec.get("store_url", str, d.store_url),
        sqlite_synchronous=synchronous,
        operators=sec.strings("operators", d.operators),
        administrators=sec.strings("administrators", d.administrators),
        private_data=sec.strings("private_data", d.private_data),
        kill_wait_s=sec.positive("kill_wait_s", d.kill_wait_s),
        min_job_age_s=sec.positive("min_job_age_s", d.min_job_age_s),
        purge_job_after_s=sec.duration("purge_job_after", d.purge_job_after_s),
        archive_dir=sec.get("archive_dir", str, d.archive_dir),
        sched_interval_s=sec.positive("sched_interval_s", d.sched_interval_s, allow_zero=False),
        log_json=sec.get("log_json", bool, d.log_json),
        log_level=log_level(sec, d.log_level),
        job_requeue=sec.get("job_requeue", bool, d.job_requeue),
        requeue_delay_s=sec.positive("requeue_delay_s", d.requeue_delay_s),
        checkpoint_cleanup=sec.get("checkpoint_cleanup", bool, d.checkpoint_cleanup),
        disruption_lead_s=sec.positive("disruption_lead_s", d.disruption_lead_s),
        elastic_grow=sec.get("elastic_grow", bool, d.elastic_grow),
        lease_s=sec.positive("lease_s", d.lease_s, allow_zero=False),
        accounting_enforce=tuple(
            v.lower() for v in sec.strings("accounting_enforce", d.accounting_enforce)
        ),
    )
    hosts = controller_hosts(sec, cfg)
    sec.done()
    if hosts:
        if "host" in sec.data:
            raise ConfigError(f"{sec.key('host')}: give controller.host or controller.hosts")
        first = hosts[0]
        cfg = replace(
            cfg,
            hosts=hosts,
            host=first.host,
            listen=first.listen,
            grpc_port=first.grpc_port,
            http_port=first.http_port,
            node_port=first.node_port,
            socket=first.socket,
        )
    for what in cfg.accounting_enforce:
        if what not in ENFORCE:
            raise ConfigError(
                f"{sec.key('accounting_enforce')}: {what!r} is not associations, limits or qos"
            )
    for what in cfg.private_data:
        if what not in PRIVATE_DATA:
            raise ConfigError(
                f"{sec.key('private_data')}: {what!r} is not jobs, accounting or cloud"
            )
    if cfg.metrics_token_file and not os.path.isabs(cfg.metrics_token_file):
        raise ConfigError(f"{sec.key('metrics_token_file')}: an absolute path")
    if cfg.socket and not (cfg.socket.startswith("@") or os.path.isabs(cfg.socket)):
        raise ConfigError(f"{sec.key('socket')}: an absolute path or @abstract-name")
    return cfg


def log_level(sec: Section, default: str) -> str:
    """A ``log_level`` key: a level word (info, debug, Slurm's verbose, ...), lower case."""
    value: str = sec.get("log_level", str, default).lower()
    try:
        level_of(value)
    except ValueError as exc:
        raise ConfigError(f"{sec.key('log_level')}: {exc}") from None
    return value


def controller_hosts(sec: Section, base: ControllerConfig) -> tuple[ControllerHost, ...]:
    """``hosts``: each a host name (every port as in [controller]) or a table that
    overrides them (two controllers on one host need their own ports and socket)."""
    raw = sec.get("hosts", list, [])
    entries: list[ControllerHost] = []
    for i, item in enumerate(raw):
        where = f"{sec.key('hosts')}[{i}]"
        if isinstance(item, str):
            item = {"host": item}
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected a host name or a table")
        one = Section(item, where)
        host = one.get("host", str, "")
        if not host:
            raise ConfigError(f"{one.key('host')}: missing (the address daemons dial)")
        entry = ControllerHost(
            host=host,
            listen=one.get("listen", str, base.listen),
            grpc_port=one.port("grpc_port", base.grpc_port),
            http_port=one.port("http_port", base.http_port),
            node_port=one.port("node_port", base.node_port),
            socket=one.get("socket", str, base.socket),
            name=one.get("name", str, ""),
        )
        one.done()
        if entry.socket and not (entry.socket.startswith("@") or os.path.isabs(entry.socket)):
            raise ConfigError(f"{one.key('socket')}: an absolute path or @abstract-name")
        entries.append(entry)
    hosts = [e.host for e in entries]
    named = []
    for e in entries:  # the host alone unless two controllers share it
        name = e.name or (e.host if hosts.count(e.host) == 1 else f"{e.host}:{e.grpc_port}")
        named.append(replace(e, name=name))
    names = [e.name for e in named]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"{sec.key('hosts')}[{i}]: controller {name!r} is listed twice")
    return tuple(named)


def check_failover(controller: ControllerConfig, heartbeat: HeartbeatConfig) -> None:
    """A standby must take over (and nodes find it) before nodes fence their jobs."""
    if not controller.failover:
        return
    fence_after = heartbeat.timeout_s - heartbeat.interval_s
    if controller.lease_s + heartbeat.interval_s >= fence_after:
        raise ConfigError(
            f"controller.lease_s: {controller.lease_s:g} s plus a heartbeat interval must be "
            f"shorter than heartbeat.timeout_s - heartbeat.interval_s ({fence_after:g} s), "
            "or nodes kill their jobs before the standby has taken over"
        )


def parse_heartbeat(sec: Section) -> HeartbeatConfig:
    d = HeartbeatConfig()
    cfg = HeartbeatConfig(
        interval_s=sec.positive("interval_s", d.interval_s, allow_zero=False),
        timeout_s=sec.positive("timeout_s", d.timeout_s, allow_zero=False),
        hold_fraction=sec.positive("hold_fraction", d.hold_fraction),
    )
    sec.done()
    if cfg.timeout_s <= cfg.interval_s:
        raise ConfigError(f"{sec.key('timeout_s')}: must be larger than heartbeat.interval_s")
    if cfg.hold_fraction > 1:
        raise ConfigError(f"{sec.key('hold_fraction')}: a share of the nodes, 0 to 1")
    return cfg
