"""The nodes: ``[noded]`` (the agent), ``[[nodes]]`` with their GPUs, ``[idle_gpus]``
(the policy for jobs whose GPUs idle), and ``[dynamic_nodes]`` (nodes not listed)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from corral.config.controller import log_level
from corral.config.paths import DEFAULT_NODED_PORT
from corral.config.power import suspend_time
from corral.config.section import Section
from corral.errors import ConfigError


@dataclass(frozen=True)
class NodedConfig:
    listen: str = ""  # empty: the node's own address (never every interface by default)
    port: int = DEFAULT_NODED_PORT
    step_port: int = DEFAULT_NODED_PORT + 3  # srun's RunTasks when the agent port is mTLS
    stream_port: int = DEFAULT_NODED_PORT + 4  # srun's framed task stream (noded/stream.py)
    spool_dir: str = "/var/spool/corral"
    log_json: bool = False
    log_level: str = "info"  # Slurm's SlurmdDebug (--log-level wins at start)
    cgroups: str = "auto"  # "auto", "v2", "v1" or "none" (psutil monitoring only)
    cgroup_root: str = "corral"  # directory made under each controller's hierarchy
    sample_interval_s: float = 5.0  # process and GPU sampling for limits and accounting
    health_interval_s: float = 10.0  # GPU health polling
    prolog: str = ""  # run as root before each job; non-zero exit drains the node
    epilog: str = ""  # run as root after each job; non-zero exit drains the node
    prolog_timeout_s: float = 60.0
    epilog_timeout_s: float = 60.0
    default_path: str = "/usr/local/bin:/usr/bin:/bin"  # PATH for --export=NONE jobs
    # CORRAL_CHECKPOINT_DIR is <checkpoint_dir>/<cluster>-<job id>-<unique id>
    # (corral/checkpoints.py); shared storage lets a requeued job find its files on
    # another node. Empty: <the job's submit dir>/.checkpoints
    checkpoint_dir: str = ""
    # cut off from ctld for heartbeat.timeout_s - interval_s, noded kills its jobs (ctld
    # requeues them at the timeout): no job runs twice across a network partition
    self_fence: bool = True
    # a job that touched $CORRAL_PROGRESS_FILE and then stops for this long while its
    # GPUs idle is stalled: killed and requeued (0: only jobs with --progress-timeout)
    progress_timeout_s: float = 0.0


@dataclass(frozen=True)
class IdleGpuConfig:
    """Jobs whose GPUs all stay under threshold_pct utilization for window_s."""

    window_s: int = 0  # 0: the policy is off
    threshold_pct: float = 5.0
    action: str = "flag"  # "flag", "cancel" or "requeue"


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
    # GPU health warnings (nvml backend): drain the node before a degrading GPU fails.
    # Correctable ECC errors rising by this many within one health poll (0: off) ...
    ecc_corrected_warn: int = 100
    # ... and HW slowdown / thermal / power-brake throttling this many polls in a row (0: off)
    throttle_warn_polls: int = 6


@dataclass(frozen=True)
class NodeConfig:
    names: tuple[str, ...]
    cpus: int = 0  # 0: discover with psutil
    memory_mb: int = 0  # 0: discover with psutil
    gpus: GpuConfig = field(default_factory=GpuConfig)
    address: str = ""  # address noded advertises; empty: its hostname
    # power saving: [power]'s suspend_time for this set (beats its partitions'); cloud
    # (Slurm's State=CLOUD): powered down until a job needs it, and again when idle
    suspend_time_s: int | None = None
    cloud: bool = False


def parse_noded(sec: Section) -> NodedConfig:
    d = NodedConfig()
    cfg = NodedConfig(
        listen=sec.get("listen", str, d.listen),
        port=sec.port("port", d.port),
        step_port=sec.port("step_port", d.step_port),
        stream_port=sec.port("stream_port", d.stream_port),
        spool_dir=sec.get("spool_dir", str, d.spool_dir),
        log_json=sec.get("log_json", bool, d.log_json),
        log_level=log_level(sec, d.log_level),
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


def parse_idle_gpus(sec: Section) -> IdleGpuConfig:
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


def parse_gpus(sec: Section) -> GpuConfig:
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
        ecc_corrected_warn=sec.positive("ecc_corrected_warn", d.ecc_corrected_warn),
        throttle_warn_polls=sec.positive("throttle_warn_polls", d.throttle_warn_polls),
    )
    sec.done()
    if cfg.topology not in ("nvlink", "pcie"):
        raise ConfigError(f"{sec.key('topology')}: {cfg.topology!r} is not nvlink or pcie")
    if cfg.count > 64:
        raise ConfigError(f"{sec.key('count')}: {cfg.count} GPUs on one node is not plausible")
    return cfg


def parse_node(sec: Section) -> NodeConfig:
    raw_gpus = sec.get("gpus", (dict, str), {})
    if isinstance(raw_gpus, str):
        raw_gpus = {"backend": raw_gpus}  # gpus = "auto" is short for gpus = {backend = "auto"}
    gpus = parse_gpus(Section(raw_gpus, sec.key("gpus")))
    cfg = NodeConfig(
        names=sec.hostlist("names", required=True),
        cpus=sec.positive("cpus", 0),
        memory_mb=sec.positive("memory_mb", 0),
        gpus=gpus,
        address=sec.get("address", str, ""),
        suspend_time_s=suspend_time(sec),
        cloud=_node_state(sec) == "cloud",
    )
    sec.done()
    return cfg


def _node_state(sec: Section) -> str:
    state: str = sec.get("state", str, "").lower()
    if state not in ("", "cloud"):
        raise ConfigError(f"{sec.key('state')}: {state!r} is not cloud (the only state set here)")
    return state


@dataclass(frozen=True)
class DynamicNodesConfig:
    """``[dynamic_nodes]``: nodes that register without being in [[nodes]] (Slurm's
    dynamic nodes, ``slurmd -Z``; ``corral noded --dynamic``), each with a node
    certificate from ``corral certs`` (never without one); their CPUs, memory and GPUs
    are their own discovery's."""

    allow: bool = False
    partitions: tuple[str, ...] = ()  # the partitions they join (none: the default one)
    max_nodes: int = 64  # Slurm's MaxNodeCount: at most this many at once
    gpus: GpuConfig = field(default_factory=lambda: GpuConfig(backend="auto"))

    def node_config(self, name: str) -> NodeConfig:
        """What a dynamic node discovers itself with (noded) and is known by (ctld)."""
        return NodeConfig(names=(name,), gpus=self.gpus)


def parse_dynamic_nodes(sec: Section, partitions: set[str]) -> DynamicNodesConfig:
    d = DynamicNodesConfig()
    raw_gpus = sec.get("gpus", (dict, str), {"backend": "auto"})
    if isinstance(raw_gpus, str):
        raw_gpus = {"backend": raw_gpus}
    cfg = DynamicNodesConfig(
        allow=sec.get("allow", bool, d.allow),
        partitions=sec.strings("partitions", ()),
        max_nodes=sec.positive("max_nodes", d.max_nodes),
        gpus=parse_gpus(Section(raw_gpus, sec.key("gpus"))),
    )
    sec.done()
    unknown = [p for p in cfg.partitions if p not in partitions]
    if unknown:
        raise ConfigError(f"{sec.key('partitions')}: {unknown[0]!r} is not a partition")
    return cfg
