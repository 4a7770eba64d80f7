"""What changed between two configs, by key: the first step of a reconfigure.

``diff(old, new)`` names every key whose value differs, as the file spells it
(``controller.purge_job_after``, ``partitions.gpu.max_time``, ``nodes.node03.gpus.count``),
and every partition, QOS, account or node added or removed (``partitions.debug`` with
``kind`` "added"). A named entry is matched by its name, not its place in the file;
a ``[[nodes]]`` entry is compared node by node (its hostlist may be split or merged
without a change). ``pattern`` is the key with the name as ``*``: what
corral/config/keyclasses.py classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral.config.cluster import ClusterConfig

# the [table] sections, in the file's usual order
TABLES = (
    "controller",
    "heartbeat",
    "noded",
    "scheduler",
    "priority",
    "idle_gpus",
    "web",
    "auth",
    "tls",
    "mail",
    "containers",
    "power",
    "dynamic_nodes",
)
NAMED = ("partitions", "qos", "accounts")  # [[arrays]] of entries named by ``name``
SCALARS = ("cluster_name",)
NOT_KEYS = ("source",)  # ClusterConfig's fields that are no key of the file

# (dataclass, field) -> the key's name in the file where the two differ
_FILE_NAMES = {
    ("ControllerConfig", "purge_job_after_s"): "purge_job_after",
    ("PartitionConfig", "max_time_s"): "max_time",
    ("PartitionConfig", "default_time_s"): "default_time",
    ("PartitionConfig", "suspend_time_s"): "suspend_time",
    ("SchedulerConfig", "starvation_guard_s"): "starvation_guard",
    ("PriorityConfig", "max_age_s"): "max_age",
    ("PriorityConfig", "decay_half_life_s"): "decay_half_life",
    ("QosConfig", "grace_time_s"): "grace_time",
    ("QosConfig", "max_wall_s"): "max_wall",
    ("NodeConfig", "suspend_time_s"): "suspend_time",
    ("NodeConfig", "cloud"): "state",
    ("PowerConfig", "suspend_time_s"): "suspend_time",
    ("PowerConfig", "suspend_timeout_s"): "suspend_timeout",
    ("PowerConfig", "resume_timeout_s"): "resume_timeout",
    ("WebConfig", "session_s"): "session",
    ("WebConfig", "login_ttl_s"): "login_ttl",
    ("MailConfig", "sender"): "from",
    ("ContainersConfig", "cache_size_bytes"): "cache_size",
}
_SKIP = {("PartitionConfig", "name"), ("QosConfig", "name"), ("AccountConfig", "name")}
_SKIP |= {("NodeConfig", "names")}

CHANGED, ADDED, REMOVED, REORDERED = "changed", "added", "removed", "reordered"


@dataclass(frozen=True)
class Changed:
    """One change: ``section`` ("" for a top-level key), ``item`` (the name of the
    partition, QOS, account or node; "" in a table), ``path`` (the dataclass fields down
    to the value; empty for an entry added, removed or the entries reordered) and
    ``names`` (the same path as the file names the keys)."""

    section: str
    item: str
    path: tuple[str, ...]
    names: tuple[str, ...]
    kind: str = CHANGED

    @property
    def key(self) -> str:
        """As the file spells it, with the entry's name: ``partitions.gpu.max_time``."""
        return ".".join(p for p in (self.section, self.item, *self.names) if p)

    @property
    def pattern(self) -> str:
        """The key with an entry's name as ``*``: ``partitions.*.max_time``."""
        item = "*" if self.item else ""
        return ".".join(p for p in (self.section, item, *self.names) if p)

    def __str__(self) -> str:
        return self.key if self.kind == CHANGED else f"{self.key} ({self.kind})"


def file_name(cls: type, name: str) -> str:
    return _FILE_NAMES.get((cls.__name__, name), name)


def diff(old: ClusterConfig, new: ClusterConfig) -> list[Changed]:
    """Every key whose value differs, and every entry added or removed, in file order."""
    out: list[Changed] = []
    for name in SCALARS:
        if getattr(old, name) != getattr(new, name):
            out.append(Changed("", "", (name,), (name,)))
    for section in TABLES:
        out += _table(section, "", getattr(old, section), getattr(new, section))
    out += _entries("nodes", _by_node(old), _by_node(new), ordered=False)
    for section in NAMED:
        ordered = section == "partitions"  # the first is the default without one
        out += _entries(section, _by_name(old, section), _by_name(new, section), ordered=ordered)
    return out


def _by_name(config: ClusterConfig, section: str) -> dict[str, Any]:
    return {entry.name: entry for entry in getattr(config, section)}


def _by_node(config: ClusterConfig) -> dict[str, Any]:
    return {name: entry for entry in config.nodes for name in entry.names}


def _entries(
    section: str, old: dict[str, Any], new: dict[str, Any], *, ordered: bool
) -> list[Changed]:
    out = [Changed(section, name, (), (), REMOVED) for name in old if name not in new]
    for name, entry in new.items():
        if name not in old:
            out.append(Changed(section, name, (), (), ADDED))
        else:
            out += _table(section, name, old[name], entry)
    kept_old = [n for n in old if n in new]
    kept_new = [n for n in new if n in old]
    if ordered and kept_old != kept_new:
        out.append(Changed(section, "", (), (), REORDERED))
    return out


def _table(
    section: str, item: str, old: Any, new: Any, path: tuple[str, ...] = ()
) -> Iterator[Changed]:
    """The fields of dataclass ``old`` and ``new`` that differ (nested ones field by field)."""
    cls = type(new)
    for f in dataclasses.fields(new):
        if (cls.__name__, f.name) in _SKIP:
            continue
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after:
            continue
        here = (*path, f.name)
        if dataclasses.is_dataclass(after) and type(before) is type(after):
            yield from _table(section, item, before, after, here)
        else:
            yield Changed(section, item, here, _names(section, here))


def _names(section: str, path: tuple[str, ...]) -> tuple[str, ...]:
    """``path`` as the file names it (each field's dataclass from the section's type)."""
    cls = SECTION_TYPES[section]
    out = []
    for name in path:
        out.append(file_name(cls, name))
        nested = next((f for f in dataclasses.fields(cls) if f.name == name), None)
        kind = _resolve(cls, nested) if nested is not None else None
        cls = kind if kind is not None else cls
    return tuple(out)


def _resolve(cls: type, f: dataclasses.Field[Any]) -> type | None:
    """The dataclass type of field ``f`` of ``cls`` (None when it is not one)."""
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if default is not dataclasses.MISSING and dataclasses.is_dataclass(default):
        return type(default)
    return None


def _section_types() -> dict[str, type]:
    from corral.config.accounting import AccountConfig, QosConfig
    from corral.config.nodes import NodeConfig
    from corral.config.scheduling import PartitionConfig

    defaults = ClusterConfig()
    types: dict[str, type] = {s: type(getattr(defaults, s)) for s in TABLES}
    types.update(
        nodes=NodeConfig, partitions=PartitionConfig, qos=QosConfig, accounts=AccountConfig
    )
    types[""] = ClusterConfig
    return types


SECTION_TYPES = _section_types()


def patterns() -> list[str]:
    """Every key pattern a diff can name (each leaf field, each entry added or removed,
    the entries reordered): what corral/config/keyclasses.py must class, every one."""
    out = list(SCALARS)

    def leaves(section: str, item: str, cls: type, names: tuple[str, ...]) -> None:
        for f in dataclasses.fields(cls):
            if (cls.__name__, f.name) in _SKIP:
                continue
            nested = _resolve(cls, f)
            here = (*names, file_name(cls, f.name))
            if nested is not None:
                leaves(section, item, nested, here)
            else:
                out.append(".".join(p for p in (section, item, *here) if p))

    for section in TABLES:
        leaves(section, "", SECTION_TYPES[section], ())
    for section in ("nodes", *NAMED):
        out.append(f"{section}.*")
        leaves(section, "*", SECTION_TYPES[section], ())
    out.append("partitions")  # reordered
    return out
