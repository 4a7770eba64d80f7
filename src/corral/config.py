"""The cluster configuration: one TOML file read by ctld, every noded and the commands.

Every key is checked; an unknown or ill-typed key is a ConfigError that names it
(``partitions[1].max_time: ...``) so a typo never silently changes behaviour.
docs/config.md is the reference for each key.
"""

from __future__ import annotations

import os
import pathlib
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from corral import hostlist
from corral.errors import ConfigError, CorralError
from corral.mailconfig import MailConfig, parse_mail
from corral.slurmfmt import UNLIMITED, parse_duration

DEFAULT_CONFIG_PATH = "/etc/corral/corral.toml"
CONFIG_ENV = "CORRAL_CONF"
DEFAULT_GRPC_PORT = 6917  # Slurm's slurmctld is 6817: both can share a host
DEFAULT_NODED_PORT = 6918
DEFAULT_HTTP_PORT = 6919
DEFAULT_NODE_PORT = 6920  # ctld's port for noded (mutual TLS), apart from the client port
DEFAULT_SOCKET = "/run/corral/ctld.sock"
AUTH_TYPES = ("local", "munge", "jwt")
PRIVATE_DATA = ("jobs", "accounting")
PREEMPT_MODES = ("", "requeue", "cancel", "off")  # Slurm's PreemptMode, SUSPEND aside
# Slurm's AccountingStorageEnforce values corral knows (docs/config.md)
ENFORCE = ("associations", "limits", "qos")
TRES_NAMES = ("cpu", "mem", "gres/gpu")  # what accounting limits count (mem in MB)


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
    state_dir: str = "/var/lib/corral"
    store_url: str = ""  # empty: sqlite:///<state_dir>/corral.db
    sqlite_synchronous: str = "FULL"  # FULL survives power loss; NORMAL only process crash
    operators: tuple[str, ...] = ("root",)
    administrators: tuple[str, ...] = ("root",)
    private_data: tuple[str, ...] = ()  # "jobs", "accounting": hide other users' jobs
    kill_wait_s: float = 30.0
    min_job_age_s: float = 300.0  # finished jobs stay visible to squeue this long
    purge_job_after_s: int = 0  # finished jobs leave the store after this; 0: never
    archive_dir: str = ""  # purged jobs are appended here (JSON lines) first; "": not kept
    sched_interval_s: float = 5.0  # periodic pass besides event-driven wake-ups
    log_json: bool = False
    job_requeue: bool = True  # Slurm's JobRequeue: a node failure requeues jobs by default
    requeue_delay_s: float = 0.0  # a requeued job waits this long (reason BeginTime)
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


@dataclass(frozen=True)
class NodedConfig:
    listen: str = ""  # empty: the node's own address (never every interface by default)
    port: int = DEFAULT_NODED_PORT
    step_port: int = DEFAULT_NODED_PORT + 3  # srun's RunTasks when the agent port is mTLS
    stream_port: int = DEFAULT_NODED_PORT + 4  # srun's framed task stream (noded/stream.py)
    spool_dir: str = "/var/spool/corral"
    log_json: bool = False
    cgroups: str = "auto"  # "auto", "v2", "v1" or "none" (psutil monitoring only)
    cgroup_root: str = "corral"  # directory made under each controller's hierarchy
    sample_interval_s: float = 5.0  # process and GPU sampling for limits and accounting
    health_interval_s: float = 10.0  # GPU health polling
    prolog: str = ""  # run as root before each job; non-zero exit drains the node
    epilog: str = ""  # run as root after each job; non-zero exit drains the node
    prolog_timeout_s: float = 60.0
    epilog_timeout_s: float = 60.0
    default_path: str = "/usr/local/bin:/usr/bin:/bin"  # PATH for --export=NONE jobs
    # CORRAL_CHECKPOINT_DIR is <checkpoint_dir>/<job id>; shared storage lets a requeued
    # job find its files on another node. Empty: <the job's submit dir>/.checkpoints
    checkpoint_dir: str = ""
    # cut off from ctld for heartbeat.timeout_s - interval_s, noded kills its jobs (ctld
    # requeues them at the timeout): no job runs twice across a network partition
    self_fence: bool = True
    # a job that touched $CORRAL_PROGRESS_FILE and then stops for this long while its
    # GPUs idle is stalled: killed and requeued (0: only jobs with --progress-timeout)
    progress_timeout_s: float = 0.0


@dataclass(frozen=True)
class AuthConfig:
    """How users prove who they are (docs/security.md)."""

    type: str = "local"  # local (Unix socket, SO_PEERCRED), munge or jwt
    jwt_key: str = ""  # HS256 key file (root only); set: tokens are accepted besides type
    munge_socket: str = ""  # empty: libmunge's default (/run/munge/munge.socket.2)
    ttl_s: int = 300  # oldest credential accepted


@dataclass(frozen=True)
class TlsConfig:
    """Mutual TLS between the daemons, from ``corral certs``."""

    dir: str = ""  # ca.crt, ctld.crt/.key, <node>.crt/.key; empty: plaintext (a warning)
    clients: bool = False  # TLS on the client ports too (HTTP gateway, gRPC Controller)

    @property
    def enabled(self) -> bool:
        return bool(self.dir)


@dataclass(frozen=True)
class IdleGpuConfig:
    """Jobs whose GPUs all stay under threshold_pct utilization for window_s."""

    window_s: int = 0  # 0: the policy is off
    threshold_pct: float = 5.0
    action: str = "flag"  # "flag", "cancel" or "requeue"


@dataclass(frozen=True)
class WebConfig:
    """ctld's web page on its HTTP port (docs/web.md)."""

    enabled: bool = True
    url: str = ""  # the page's address as browsers reach it; "": http(s)://host:http_port
    session_s: int = 12 * 3600  # a browser session lasts this long
    login_ttl_s: int = 120  # a login URL is refused after this (and after its first use)
    refresh_s: float = 1.0  # an open page gets at most one live update this often


@dataclass(frozen=True)
class GpuConfig:
    backend: str = "none"  # "none", "fake", "nvml", or "auto" (NVML if usable, else none)
    count: int = 0
    model: str = "NVIDIA H100 80GB HBM3"
    memory_mb: int = 81559
    type: str = ""  # GRES type name; empty: derived from the model ("h100")
    topology: str = "nvlink"  # fake backend: "nvlink" (all pairs NV18) or "pcie"
    state_file: str = ""  # fake backend: JSON that tests write to inject load and faults
    # gres/shard: each GPU offers this many shards to --gres=shard:K jobs (0: no sharing;
    # Slurm's gres.conf Name=shard Count= is this times the GPU count)
    shards_per_gpu: int = 0


@dataclass(frozen=True)
class NodeConfig:
    names: tuple[str, ...]
    cpus: int = 0  # 0: discover with psutil
    memory_mb: int = 0  # 0: discover with psutil
    gpus: GpuConfig = field(default_factory=GpuConfig)
    address: str = ""  # address noded advertises; empty: its hostname


@dataclass(frozen=True)
class PartitionConfig:
    name: str
    nodes: tuple[str, ...]
    default: bool = False
    state: str = "UP"
    max_time_s: int = UNLIMITED
    default_time_s: int = UNLIMITED  # UNLIMITED here means "use max_time"
    max_nodes: int = 0
    priority_tier: int = 1
    allow_accounts: tuple[str, ...] = ()
    allow_groups: tuple[str, ...] = ()  # Unix groups whose members may use it; empty: all


# ---------------------------------------------------------------- scheduling policy


@dataclass(frozen=True)
class SchedulerConfig:
    backfill: bool = True
    reserve_depth: int = 1  # 1: EASY backfill; large: conservative
    forecast_depth: int = 100  # further blocked jobs that get an expected start
    # of those, how many (in priority order) hold their expected slot so that the ones
    # behind are forecast after them; forecasts only, never a start (docs/simulator.md)
    stack_forecasts: int = 0  # opt-in: 16 cuts the forecasts' p90, triples a deep pass
    # "pack" (best fit), "firstfit", "frag" (best fit, time- and fragmentation-aware),
    # "fgd" (least fragmentation first: ATC'23's rule) or "random"
    placement: str = "pack"
    kill_invalid_depend: bool = False  # cancel jobs whose dependency can never be met
    max_array_size: int = 1001  # Slurm's MaxArraySize: array task ids stay below it
    # plan backfill and forecasts with run times predicted from each user's history
    # (false: by time limits only); jobs are always killed at their own limits
    predict: bool = True
    backfill_order: str = (
        "shortest"  # backfill candidates: "shortest" predicted first, or "priority"
    )
    # pending jobs that cannot start one pass tries in full (Slurm's bf_max_job_test);
    # starts, and jobs of a class that already failed in the pass, are not tries; 0: none
    max_job_test: int = 500
    # decide a new job at submit against the last plan's reservations (sched/quick.py)
    # when only submits happened since that pass, instead of waiting for the next one
    start_on_submit: bool = True
    # the job eligible longest, once past this, goes first and gets the reservation,
    # kept by limits (the starvation guard, docs/simulator.md); 0: off
    starvation_guard_s: int = 24 * 3600
    # Slurm's PreemptType=preempt/qos with its PreemptMode: "off" (preempt/none),
    # "requeue" or "cancel" (what a preempted job of a QOS without its own mode gets)
    preempt_mode: str = "off"


@dataclass(frozen=True)
class PriorityConfig:
    # the defaults are the policy measured best in replays (docs/simulator.md): age
    # strong enough to overtake any fair-share gap within days, no job-size factor
    weight_age: int = 20000
    weight_fairshare: int = 10000
    weight_job_size: int = 0
    weight_partition: int = 1000
    weight_qos: int = 1000
    max_age_s: int = 7 * 86400
    favor_small: bool = False
    decay_half_life_s: int = 7 * 86400
    # what one second of a resource costs in fair-share usage (TRES billing weights)
    tres_weights: tuple[tuple[str, float], ...] = (("cpu", 1.0), ("gpu", 10.0), ("mem_gb", 0.0))

    def weight(self, tres: str) -> float:
        return dict(self.tres_weights).get(tres, 0.0)


@dataclass(frozen=True)
class AccountConfig:
    name: str
    parent: str = "root"
    shares: int = 1
    users: tuple[tuple[str, int], ...] = ()  # (user, shares)


@dataclass(frozen=True)
class QosConfig:
    name: str
    priority: int = 0
    max_jobs_per_user: int = 0  # running jobs; 0: no limit
    preempt: tuple[str, ...] = ()  # the QOSes whose jobs this QOS's jobs may preempt
    preempt_mode: str = ""  # "requeue", "cancel" or "off"; "": the cluster's preempt_mode
    grace_time_s: int = 0  # a preempted job of this QOS gets SIGTERM, then this long to end
    usage_factor: float = 1.0  # scales fair-share usage and GPU-hours charged to its jobs
    # accounting limits (sacctmgr's; TRES keys from TRES_NAMES, mem in MB); 0 / -1 / ():
    # no limit
    max_wall_s: int = UNLIMITED  # MaxWall: no job of this QOS may ask for longer
    max_tres_per_user: tuple[tuple[str, int], ...] = ()  # MaxTRESPerUser (running jobs)
    max_tres_per_job: tuple[tuple[str, int], ...] = ()  # MaxTRESPerJob (refused at submit)
    max_submit_jobs_per_user: int = 0  # MaxSubmitJobsPerUser: pending + running
    grp_tres: tuple[tuple[str, int], ...] = ()  # GrpTRES: all running jobs of the QOS
    grp_jobs: int = 0  # GrpJobs: running jobs of the QOS
    description: str = ""


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


# ---------------------------------------------------------------- parsing


class _Section:
    """Typed access to one TOML table that remembers which keys were read."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and kind is not bool:
            raise ConfigError(f"{self.key(name)}: expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise ConfigError(
                f"{self.key(name)}: expected {_kind_name(kind)}, got {type(value).__name__}"
            )
        return value

    def positive(self, name: str, default: float, *, allow_zero: bool = True) -> Any:
        value = self.get(name, (int, float) if isinstance(default, float) else int, default)
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{self.key(name)}: must be {'>= 0' if allow_zero else '> 0'}")
        return value

    def port(self, name: str, default: int) -> int:
        value: int = self.get(name, int, default)
        if not 0 <= value <= 65535:
            raise ConfigError(f"{self.key(name)}: {value} is not a TCP port")
        return value

    def duration(self, name: str, default: int) -> int:
        self.used.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"{self.key(name)}: a duration in seconds must be >= 0")
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: expected a Slurm time string like '1-00:00:00'")
        try:
            return parse_duration(value)
        except CorralError as exc:
            raise ConfigError(f"{self.key(name)}: {exc}") from None

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(name, (list, str), list(default))
        if isinstance(value, str):
            value = [value]
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.key(name)}: expected a list of strings")
        return tuple(value)

    def hostlist(self, name: str, *, required: bool) -> tuple[str, ...]:
        self.used.add(name)
        if name not in self.data:
            if required:
                raise ConfigError(f"{self.key(name)}: missing (a hostlist such as 'node[01-04]')")
            return ()
        value = self.data[name]
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: expected a hostlist string")
        try:
            names = hostlist.expand(value)
        except CorralError as exc:
            raise ConfigError(f"{self.key(name)}: {exc}") from None
        if not names:
            raise ConfigError(f"{self.key(name)}: empty hostlist")
        return tuple(names)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(f"{self.key(unknown[0])}: unknown key")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _controller(sec: _Section) -> ControllerConfig:
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
        job_requeue=sec.get("job_requeue", bool, d.job_requeue),
        requeue_delay_s=sec.positive("requeue_delay_s", d.requeue_delay_s),
        lease_s=sec.positive("lease_s", d.lease_s, allow_zero=False),
        accounting_enforce=tuple(
            v.lower() for v in sec.strings("accounting_enforce", d.accounting_enforce)
        ),
    )
    hosts = _controller_hosts(sec, cfg)
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
            raise ConfigError(f"{sec.key('private_data')}: {what!r} is not jobs or accounting")
    if cfg.socket and not (cfg.socket.startswith("@") or os.path.isabs(cfg.socket)):
        raise ConfigError(f"{sec.key('socket')}: an absolute path or @abstract-name")
    return cfg


def _controller_hosts(sec: _Section, base: ControllerConfig) -> tuple[ControllerHost, ...]:
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
        one = _Section(item, where)
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


def _check_failover(controller: ControllerConfig, heartbeat: HeartbeatConfig) -> None:
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


def _auth(sec: _Section) -> AuthConfig:
    d = AuthConfig()
    cfg = AuthConfig(
        type=sec.get("type", str, d.type),
        jwt_key=sec.get("jwt_key", str, d.jwt_key),
        munge_socket=sec.get("munge_socket", str, d.munge_socket),
        ttl_s=sec.positive("ttl_s", d.ttl_s, allow_zero=False),
    )
    sec.done()
    if cfg.type not in AUTH_TYPES:
        raise ConfigError(f"{sec.key('type')}: {cfg.type!r} is not local, munge or jwt")
    if cfg.type == "jwt" and not cfg.jwt_key:
        raise ConfigError(f'{sec.key("jwt_key")}: type = "jwt" needs a key file')
    return cfg


def _tls(sec: _Section) -> TlsConfig:
    cfg = TlsConfig(dir=sec.get("dir", str, ""), clients=sec.get("clients", bool, False))
    sec.done()
    if cfg.clients and not cfg.dir:
        raise ConfigError(f"{sec.key('clients')}: needs tls.dir (the certificates)")
    return cfg


def _heartbeat(sec: _Section) -> HeartbeatConfig:
    d = HeartbeatConfig()
    cfg = HeartbeatConfig(
        interval_s=sec.positive("interval_s", d.interval_s, allow_zero=False),
        timeout_s=sec.positive("timeout_s", d.timeout_s, allow_zero=False),
    )
    sec.done()
    if cfg.timeout_s <= cfg.interval_s:
        raise ConfigError(f"{sec.key('timeout_s')}: must be larger than heartbeat.interval_s")
    return cfg


def _noded(sec: _Section) -> NodedConfig:
    d = NodedConfig()
    cfg = NodedConfig(
        listen=sec.get("listen", str, d.listen),
        port=sec.port("port", d.port),
        step_port=sec.port("step_port", d.step_port),
        stream_port=sec.port("stream_port", d.stream_port),
        spool_dir=sec.get("spool_dir", str, d.spool_dir),
        log_json=sec.get("log_json", bool, d.log_json),
        cgroups=sec.get("cgroups", str, d.cgroups),
        cgroup_root=sec.get("cgroup_root", str, d.cgroup_root),
        sample_interval_s=sec.positive("sample_interval_s", d.sample_interval_s, allow_zero=False),
        health_interval_s=sec.positive("health_interval_s", d.health_interval_s, allow_zero=False),
        prolog=sec.get("prolog", str, d.prolog),
        epilog=sec.get("epilog", str, d.epilog),
        prolog_timeout_s=sec.positive("prolog_timeout_s", d.prolog_timeout_s, allow_zero=False),
        epilog_timeout_s=sec.positive("epilog_timeout_s", d.epilog_timeout_s, allow_zero=False),
        default_path=sec.get("default_path", str, d.default_path),
        checkpoint_dir=sec.get("checkpoint_dir", str, d.checkpoint_dir),
        self_fence=sec.get("self_fence", bool, d.self_fence),
        progress_timeout_s=sec.positive("progress_timeout_s", d.progress_timeout_s),
    )
    sec.done()
    if cfg.cgroups not in ("auto", "v2", "v1", "none"):
        raise ConfigError(f"{sec.key('cgroups')}: {cfg.cgroups!r} is not auto, v2, v1 or none")
    if not cfg.cgroup_root or "/" in cfg.cgroup_root.strip("/") or ".." in cfg.cgroup_root:
        raise ConfigError(f"{sec.key('cgroup_root')}: must be one directory name")
    for key in ("prolog", "epilog", "checkpoint_dir"):
        path = getattr(cfg, key)
        if path and not os.path.isabs(path):
            raise ConfigError(f"{sec.key(key)}: {path!r} must be an absolute path")
    return cfg


def _idle_gpus(sec: _Section) -> IdleGpuConfig:
    d = IdleGpuConfig()
    cfg = IdleGpuConfig(
        window_s=sec.duration("window_s", d.window_s),
        threshold_pct=sec.positive("threshold_pct", d.threshold_pct),
        action=sec.get("action", str, d.action),
    )
    sec.done()
    if cfg.action not in ("flag", "cancel", "requeue"):
        raise ConfigError(f"{sec.key('action')}: {cfg.action!r} is not flag, cancel or requeue")
    if cfg.threshold_pct > 100:
        raise ConfigError(f"{sec.key('threshold_pct')}: a utilization is at most 100")
    return cfg


def _web(sec: _Section) -> WebConfig:
    d = WebConfig()
    cfg = WebConfig(
        enabled=sec.get("enabled", bool, d.enabled),
        url=sec.get("url", str, d.url).rstrip("/"),
        session_s=sec.duration("session", d.session_s),
        login_ttl_s=sec.duration("login_ttl", d.login_ttl_s),
        refresh_s=sec.positive("refresh_s", d.refresh_s, allow_zero=False),
    )
    sec.done()
    if cfg.url and not cfg.url.startswith(("http://", "https://")):
        raise ConfigError(f"{sec.key('url')}: {cfg.url!r} is not an http:// or https:// URL")
    if cfg.session_s <= 0 or cfg.login_ttl_s <= 0:
        raise ConfigError(f"{sec.key('session')}, {sec.key('login_ttl')}: must be > 0")
    return cfg


def _gpus(sec: _Section) -> GpuConfig:
    d = GpuConfig()
    backend = sec.get("backend", str, "fake" if "count" in sec.data else d.backend)
    if backend not in ("none", "fake", "nvml", "auto"):
        raise ConfigError(
            f"{sec.key('backend')}: {backend!r} is not a GPU backend (none, fake, nvml, auto)"
        )
    cfg = GpuConfig(
        backend=backend,
        count=sec.positive("count", d.count),
        model=sec.get("model", str, d.model),
        memory_mb=sec.positive("memory_mb", d.memory_mb),
        type=sec.get("type", str, d.type),
        topology=sec.get("topology", str, d.topology),
        state_file=sec.get("state_file", str, d.state_file),
        shards_per_gpu=sec.positive("shards_per_gpu", d.shards_per_gpu),
    )
    sec.done()
    if cfg.topology not in ("nvlink", "pcie"):
        raise ConfigError(f"{sec.key('topology')}: {cfg.topology!r} is not nvlink or pcie")
    if cfg.count > 64:
        raise ConfigError(f"{sec.key('count')}: {cfg.count} GPUs on one node is not plausible")
    return cfg


def _node(sec: _Section) -> NodeConfig:
    raw_gpus = sec.get("gpus", (dict, str), {})
    if isinstance(raw_gpus, str):
        raw_gpus = {"backend": raw_gpus}  # gpus = "auto" is short for gpus = {backend = "auto"}
    gpus = _gpus(_Section(raw_gpus, sec.key("gpus")))
    cfg = NodeConfig(
        names=sec.hostlist("names", required=True),
        cpus=sec.positive("cpus", 0),
        memory_mb=sec.positive("memory_mb", 0),
        gpus=gpus,
        address=sec.get("address", str, ""),
    )
    sec.done()
    return cfg


def _partition(sec: _Section, known_nodes: set[str]) -> PartitionConfig:
    name = sec.get("name", str, "")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{sec.key('name')}: a partition needs a name of letters, digits, - or _")
    state = sec.get("state", str, "UP").upper()
    if state not in ("UP", "DOWN", "DRAIN", "INACTIVE"):
        raise ConfigError(f"{sec.key('state')}: must be UP, DOWN, DRAIN or INACTIVE")
    nodes = sec.hostlist("nodes", required=True)
    unknown = [n for n in nodes if n not in known_nodes]
    if unknown:
        raise ConfigError(f"{sec.key('nodes')}: {unknown[0]!r} is not in any [[nodes]] entry")
    cfg = PartitionConfig(
        name=name,
        nodes=nodes,
        default=sec.get("default", bool, False),
        state=state,
        max_time_s=sec.duration("max_time", UNLIMITED),
        default_time_s=sec.duration("default_time", UNLIMITED),
        max_nodes=sec.positive("max_nodes", 0),
        priority_tier=sec.positive("priority_tier", 1),
        allow_accounts=sec.strings("allow_accounts", ()),
        allow_groups=sec.strings("allow_groups", ()),
    )
    sec.done()
    return cfg


def _scheduler(sec: _Section) -> SchedulerConfig:
    d = SchedulerConfig()
    placement = sec.get("placement", str, d.placement)
    if placement not in ("pack", "firstfit", "frag", "fgd", "random"):
        raise ConfigError(f"{sec.key('placement')}: must be pack, firstfit, frag, fgd or random")
    order = sec.get("backfill_order", str, d.backfill_order)
    if order not in ("shortest", "priority"):
        raise ConfigError(f"{sec.key('backfill_order')}: must be shortest or priority")
    preempt_mode = sec.get("preempt_mode", str, d.preempt_mode)
    if preempt_mode not in ("off", "requeue", "cancel"):
        raise ConfigError(f"{sec.key('preempt_mode')}: must be off, requeue or cancel")
    cfg = SchedulerConfig(
        backfill=sec.get("backfill", bool, d.backfill),
        reserve_depth=sec.positive("reserve_depth", d.reserve_depth),
        forecast_depth=sec.positive("forecast_depth", d.forecast_depth),
        stack_forecasts=sec.positive("stack_forecasts", d.stack_forecasts),
        placement=placement,
        kill_invalid_depend=sec.get("kill_invalid_depend", bool, d.kill_invalid_depend),
        max_array_size=sec.positive("max_array_size", d.max_array_size, allow_zero=False),
        predict=sec.get("predict", bool, d.predict),
        backfill_order=order,
        max_job_test=sec.positive("max_job_test", d.max_job_test),
        start_on_submit=sec.get("start_on_submit", bool, d.start_on_submit),
        starvation_guard_s=sec.duration("starvation_guard", d.starvation_guard_s),
        preempt_mode=preempt_mode,
    )
    sec.done()
    return cfg


def _priority(sec: _Section) -> PriorityConfig:
    d = PriorityConfig()
    raw_tres = sec.get("tres_weights", dict, dict(d.tres_weights))
    tres: dict[str, float] = dict(d.tres_weights)
    for key, value in raw_tres.items():
        if key not in ("cpu", "gpu", "mem_gb"):
            raise ConfigError(f"{sec.key('tres_weights')}.{key}: unknown TRES (cpu, gpu, mem_gb)")
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{sec.key('tres_weights')}.{key}: must be a number >= 0")
        tres[key] = float(value)
    cfg = PriorityConfig(
        weight_age=sec.positive("weight_age", d.weight_age),
        weight_fairshare=sec.positive("weight_fairshare", d.weight_fairshare),
        weight_job_size=sec.positive("weight_job_size", d.weight_job_size),
        weight_partition=sec.positive("weight_partition", d.weight_partition),
        weight_qos=sec.positive("weight_qos", d.weight_qos),
        max_age_s=sec.duration("max_age", d.max_age_s),
        favor_small=sec.get("favor_small", bool, d.favor_small),
        decay_half_life_s=sec.duration("decay_half_life", d.decay_half_life_s),
        tres_weights=tuple(sorted(tres.items())),
    )
    sec.done()
    for key in ("max_age", "decay_half_life"):
        if getattr(cfg, f"{key}_s") <= 0:
            raise ConfigError(f"{sec.key(key)}: must be a positive duration")
    return cfg


def _name_ok(name: str) -> bool:
    return bool(name) and len(name) <= 64 and name.replace("-", "").replace("_", "").isalnum()


def _account(sec: _Section) -> AccountConfig:
    name = sec.get("name", str, "")
    if not _name_ok(name):
        raise ConfigError(f"{sec.key('name')}: an account needs a name of letters, digits, - or _")
    shares = sec.positive("shares", 1)
    users: list[tuple[str, int]] = [(u, 1) for u in sec.strings("users", ())]
    for user, value in sec.get("user_shares", dict, {}).items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{sec.key('user_shares')}.{user}: must be an integer >= 0")
        users = [(u, s) for u, s in users if u != user] + [(user, value)]
    cfg = AccountConfig(
        name=name,
        parent=sec.get("parent", str, "root" if name != "root" else ""),
        shares=int(shares),
        users=tuple(sorted(users)),
    )
    sec.done()
    return cfg


def _qos(sec: _Section) -> QosConfig:
    name = sec.get("name", str, "")
    if not _name_ok(name):
        raise ConfigError(f"{sec.key('name')}: a QOS needs a name of letters, digits, - or _")
    cfg = QosConfig(
        name=name,
        priority=sec.positive("priority", 0),
        max_jobs_per_user=sec.positive("max_jobs_per_user", 0),
        preempt=sec.strings("preempt", ()),
        preempt_mode=sec.get("preempt_mode", str, ""),
        grace_time_s=sec.duration("grace_time", 0),
        usage_factor=float(sec.positive("usage_factor", 1.0)),
        max_wall_s=sec.duration("max_wall", UNLIMITED),
        max_tres_per_user=_tres_table(sec, "max_tres_per_user"),
        max_tres_per_job=_tres_table(sec, "max_tres_per_job"),
        max_submit_jobs_per_user=sec.positive("max_submit_jobs_per_user", 0),
        grp_tres=_tres_table(sec, "grp_tres"),
        grp_jobs=sec.positive("grp_jobs", 0),
        description=sec.get("description", str, ""),
    )
    if cfg.preempt_mode not in PREEMPT_MODES:
        raise ConfigError(
            f"{sec.key('preempt_mode')}: {cfg.preempt_mode!r} is not requeue, cancel or off"
        )
    sec.done()
    return cfg


def _tres_table(sec: _Section, name: str) -> tuple[tuple[str, int], ...]:
    """A TRES limit table such as ``{ "gres/gpu" = 4, cpu = 32 }`` (mem in MB)."""
    raw = sec.get(name, dict, {})
    out: list[tuple[str, int]] = []
    for key, value in raw.items():
        if key not in TRES_NAMES:
            raise ConfigError(f"{sec.key(name)}.{key}: unknown TRES (cpu, mem, gres/gpu)")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{sec.key(name)}.{key}: must be an integer >= 0")
        out.append((key, value))
    return tuple(sorted(out))


def preempt_loop(qos: Iterable[QosConfig]) -> list[str]:
    """A chain of QOSes that preempt each other back to the first ([] if none).

    Slurm refuses such a chain (a QOS preempting itself included): two jobs could
    otherwise take the same resources from each other forever.
    """
    edges = {q.name: q.preempt for q in qos}
    for start in edges:
        path, todo = [start], [iter(edges[start])]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                todo.pop()
                path.pop()
            elif nxt == start:
                return [*path, nxt]
            elif nxt not in path and nxt in edges:
                path.append(nxt)
                todo.append(iter(edges[nxt]))
    return []


def _check_accounts(accounts: tuple[AccountConfig, ...]) -> None:
    names = [a.name for a in accounts]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"accounts[{i}].name: account {name!r} is defined twice")
    known = set(names) | {"root"}
    parents = {a.name: a.parent for a in accounts}
    for i, a in enumerate(accounts):
        if a.name != "root" and a.parent not in known:
            raise ConfigError(f"accounts[{i}].parent: {a.parent!r} is not an account")
        seen, at = {a.name}, a.parent
        while at and at != "root":
            if at in seen:
                raise ConfigError(f"accounts[{i}].parent: accounts form a cycle through {at!r}")
            seen.add(at)
            at = parents.get(at, "")


def parse_config(data: dict[str, Any], source: str = "<config>") -> ClusterConfig:
    """Validate a parsed TOML document into a ClusterConfig."""
    top = _Section(data, "")
    cluster_name = top.get("cluster_name", str, "corral")
    controller = _controller(_Section(top.get("controller", dict, {}), "controller"))
    heartbeat = _heartbeat(_Section(top.get("heartbeat", dict, {}), "heartbeat"))
    _check_failover(controller, heartbeat)
    noded = _noded(_Section(top.get("noded", dict, {}), "noded"))
    raw_nodes = top.get("nodes", list, [])
    nodes = tuple(_node(_Section(n, f"nodes[{i}]")) for i, n in enumerate(raw_nodes))
    seen: set[str] = set()
    for i, entry in enumerate(nodes):
        for n in entry.names:
            if n in seen:
                raise ConfigError(f"nodes[{i}].names: node {n!r} is listed twice")
            seen.add(n)
    raw_parts = top.get("partitions", list, [])
    partitions = tuple(
        _partition(_Section(p, f"partitions[{i}]"), seen) for i, p in enumerate(raw_parts)
    )
    scheduler = _scheduler(_Section(top.get("scheduler", dict, {}), "scheduler"))
    priority = _priority(_Section(top.get("priority", dict, {}), "priority"))
    raw_accounts = top.get("accounts", list, [])
    accounts = tuple(_account(_Section(a, f"accounts[{i}]")) for i, a in enumerate(raw_accounts))
    _check_accounts(accounts)
    raw_qos = top.get("qos", list, [])
    qos = tuple(_qos(_Section(q, f"qos[{i}]")) for i, q in enumerate(raw_qos))
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
    idle_gpus = _idle_gpus(_Section(top.get("idle_gpus", dict, {}), "idle_gpus"))
    web = _web(_Section(top.get("web", dict, {}), "web"))
    auth = _auth(_Section(top.get("auth", dict, {}), "auth"))
    tls = _tls(_Section(top.get("tls", dict, {}), "tls"))
    mail = parse_mail(_Section(top.get("mail", dict, {}), "mail"))
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
        source=source,
    )


def config_path(explicit: str | None = None) -> str:
    return explicit or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH


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
