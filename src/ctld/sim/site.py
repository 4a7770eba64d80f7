"""The site a replay of its history runs on: a configuration (the running one, or a
candidate), the accounting database under it, and each node's size.

A candidate is the running config file with key overrides (``--set KEY=VALUE``, the
TOML keys of docs/config.md: ``scheduler.placement=fgd``, ``priority.weight_age=5000``;
an entry of a list of tables by its name: ``partitions.gpu.max_time="2:00:00"``,
``accounts.ml.shares=6``, ``qos.high.priority=100``), or another config file. Shares
and QOSes the candidate changes are applied over sacctmgr's records too (those win over
the config in a running ctld, so a change made only in the file would not show).
Nodes whose size the config leaves to discovery (``cpus = 0``, NVML GPUs) get the
largest use their jobs made of them: a lower bound, said in the output.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.config import ClusterConfig, parse_config
from corral.config.paths import config_path
from corral.errors import ConfigError
from corral.gres import gpu_type_from_model
from corral.wire import corral_pb2 as pb
from ctld.model.accounting import Accounting, assoc_key

# the lists of tables whose entries an override names by their ``name``
NAMED_LISTS = ("partitions", "accounts", "qos")


@dataclass(frozen=True)
class NodeSize:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str = ""
    shards_per_gpu: int = 0
    inferred: bool = False  # from its jobs' use (a lower bound), not the config


@dataclass
class Site:
    """One configuration of the site: what a replay schedules with."""

    name: str  # "running" or "candidate"
    config: ClusterConfig
    accounting: Accounting
    nodes: tuple[NodeSize, ...] = ()
    changes: tuple[str, ...] = field(default_factory=tuple)  # what differs, as given


def read_document(path: str | None) -> tuple[str, dict[str, Any]]:
    """The config file's path and TOML document (ConfigError naming what is wrong)."""
    where = config_path(path)
    try:
        raw = pathlib.Path(where).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the config: {exc.strerror}") from None
    try:
        return where, tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None


def parse_value(text: str) -> Any:
    """A TOML value (``5000``, ``true``, ``"2:00:00"``, ``{ gpu = 20.0 }``), or the text
    itself when it is none (``fgd``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(document: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """``document`` with each ``KEY=VALUE`` set (a copy; ConfigError for a bad one)."""
    doc = copy.deepcopy(document)
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = [p for p in key.strip().split(".")]
        if not sep or not key.strip() or any(not p for p in parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (scheduler.placement=fgd)")
        value = parse_value(raw.strip())
        table: dict[str, Any] = doc
        if parts[0] in NAMED_LISTS:
            if len(parts) < 3:
                raise ConfigError(
                    f"--set {item!r}: name the entry and its key ({parts[0]}.NAME.KEY=VALUE)"
                )
            entries = doc.setdefault(parts[0], [])
            found = [e for e in entries if isinstance(e, dict) and e.get("name") == parts[1]]
            if not found:
                if parts[0] == "partitions":
                    raise ConfigError(f"--set {item!r}: no partition {parts[1]!r} in the config")
                entries.append({"name": parts[1]})
                found = entries[-1:]
            table, parts = found[0], parts[2:]
        for part in parts[:-1]:
            nxt = table.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a table")
            table = nxt
        table[parts[-1]] = value
    return doc


def make_config(document: dict[str, Any], source: str) -> ClusterConfig:
    try:
        return parse_config(document, source)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def running_site(config: ClusterConfig, records: list[tuple[str, str, str]]) -> Site:
    accounting = Accounting(config)
    accounting.load(records)
    return Site("running", config, accounting)


def candidate_site(
    running: Site,
    config: ClusterConfig,
    records: list[tuple[str, str, str]],
    changes: Iterable[str],
) -> Site:
    """The candidate: ``config``, with the shares and QOSes it changes from the running
    config put over sacctmgr's records as well."""
    accounting = Accounting(config)
    accounting.load(records)
    before = {a.name: a for a in running.config.accounts}
    for acct in config.accounts:
        old = before.get(acct.name)
        if old is None or old.shares != acct.shares:
            own = accounting.assocs.get(assoc_key(acct.name, ""))
            if own is not None:
                own.fairshare = acct.shares
        old_users = dict(old.users) if old is not None else {}
        for user, shares in acct.users:
            if old_users.get(user) != shares:
                mine = accounting.assocs.get(assoc_key(acct.name, user))
                if mine is not None:
                    mine.fairshare = shares
    qos_before = {q.name: q for q in running.config.qos}
    for q in config.qos:
        if qos_before.get(q.name) != q:
            accounting.qos[q.name] = q
    return Site("candidate", config, accounting, changes=tuple(changes))


def node_sizes(config: ClusterConfig, jobs: Iterable[pb.Job]) -> tuple[NodeSize, ...]:
    """Each configured node's size; what discovery would find is taken from its jobs'
    largest use (CPUs and memory at once, the highest GPU index)."""
    use = _largest_use(jobs)
    out = []
    for entry in config.nodes:
        gpus_cfg = entry.gpus
        gpu_type = gpus_cfg.type or (
            gpu_type_from_model(gpus_cfg.model) if gpus_cfg.backend != "none" else ""
        )
        for name in entry.names:
            cpus, mem, gpus = entry.cpus, entry.memory_mb, gpus_cfg.count
            used = use.get(name, (0, 0, 0))
            inferred = False
            if cpus <= 0:
                cpus, inferred = max(used[0], 1), True
            if mem <= 0:
                mem, inferred = used[1], True
            if gpus_cfg.backend in ("nvml", "auto") and gpus <= 0:
                gpus, inferred = used[2], True
            elif gpus_cfg.backend == "none":
                gpus = 0
            out.append(NodeSize(name, cpus, mem, gpus, gpu_type, gpus_cfg.shards_per_gpu, inferred))
    return tuple(out)


def _largest_use(jobs: Iterable[pb.Job]) -> dict[str, tuple[int, int, int]]:
    """Per node: the most CPUs and memory its jobs held at once, and 1 + the highest GPU
    index they held."""
    steps: dict[str, list[tuple[float, int, int]]] = {}
    gpus: dict[str, int] = {}
    for job in jobs:
        if job.start_time <= 0:
            continue
        end = job.end_time if job.end_time > 0 else float("inf")
        for a in job.allocations:
            steps.setdefault(a.node, []).extend(
                [(job.start_time, a.cpus, a.mem_mb), (end, -a.cpus, -a.mem_mb)]
            )
            top = max(a.gpu_indices, default=-1) + 1
            gpus[a.node] = max(gpus.get(a.node, 0), top)
    out: dict[str, tuple[int, int, int]] = {}
    for node, events in steps.items():
        events.sort(key=lambda e: (e[0], e[1]))  # ends (negative) first at one instant
        cpus = mem = top_cpus = top_mem = 0
        for _at, c, m in events:
            cpus, mem = cpus + c, mem + m
            top_cpus, top_mem = max(top_cpus, cpus), max(top_mem, mem)
        out[node] = (top_cpus, top_mem, gpus.get(node, 0))
    for node, g in gpus.items():
        out.setdefault(node, (0, 0, g))
    return out


def describe_changes(running: ClusterConfig, candidate: ClusterConfig) -> list[str]:
    """What the candidate changes, section by section (for the report's heading)."""
    out: list[str] = []
    for section in ("scheduler", "priority"):
        old, new = getattr(running, section), getattr(candidate, section)
        for f in dataclasses.fields(old):
            a, b = getattr(old, f.name), getattr(new, f.name)
            if a != b:
                out.append(f"{section}.{f.name}: {a!r} -> {b!r}")
    for kind in NAMED_LISTS:
        old_entries: Mapping[str, Any] = {e.name: e for e in getattr(running, kind)}
        for entry in getattr(candidate, kind):
            was = old_entries.get(entry.name)
            if was is None:
                out.append(f"{kind}.{entry.name}: added")
                continue
            for f in dataclasses.fields(entry):
                a, b = getattr(was, f.name), getattr(entry, f.name)
                if a != b:
                    out.append(f"{kind}.{entry.name}.{f.name}: {a!r} -> {b!r}")
    return out
