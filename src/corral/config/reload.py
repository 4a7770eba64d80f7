"""A reconfigure's plan for one daemon: what changed (corral/config/diff.py), which of
it applies live and which needs a restart (corral/config/keyclasses.py), and the config
to run with from now on: the new file's, with every restart-only key kept at the value
the daemon runs with (so the next reconfigure reports it again until a restart).

Pure: reading the file, refusing it and applying the plan are the daemons' own
(ctld/control/reconfig.py, noded/reconfig.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.config.cluster import ClusterConfig
from corral.config.diff import CHANGED, Changed, diff
from corral.config.keyclasses import classify
from corral.config.nodes import NodeConfig


@dataclass(frozen=True)
class Reload:
    live: tuple[Changed, ...]  # applied now
    restart: tuple[Changed, ...]  # changed in the file, kept as they run until a restart
    config: ClusterConfig  # what the daemon runs with once the live keys are applied

    @property
    def changed(self) -> bool:
        return bool(self.live or self.restart)


def plan(
    running: ClusterConfig,
    new: ClusterConfig,
    daemon: str,
    mine: Callable[[Changed], bool] = lambda change: True,
) -> Reload:
    """How ``daemon``, running with file config ``running``, takes file config ``new``;
    ``mine``: the changes that concern it (a noded: its own node's entry, not others')."""
    changes = [c for c in diff(running, new) if mine(c)]
    live, restart = classify(changes, daemon)
    return Reload(tuple(live), tuple(restart), keep(new, running, restart))


def keep(new: ClusterConfig, old: ClusterConfig, changes: list[Changed]) -> ClusterConfig:
    """``new`` with the keys of ``changes`` at their values in ``old``."""
    nodes: dict[str, list[tuple[str, ...]]] = {}
    for ch in changes:
        if ch.kind != CHANGED:
            continue  # an entry added or removed is never kept back: no class says so
        if not ch.section:
            new = dataclasses.replace(new, **{ch.path[0]: getattr(old, ch.path[0])})
        elif ch.section == "nodes":
            nodes.setdefault(ch.item, []).append(ch.path)
        elif not ch.item:
            table = _back(getattr(new, ch.section), getattr(old, ch.section), ch.path)
            new = dataclasses.replace(new, **{ch.section: table})
        else:
            entries: Any = tuple(
                _back(e, _named(old, ch.section, ch.item), ch.path) if e.name == ch.item else e
                for e in getattr(new, ch.section)
            )
            new = dataclasses.replace(new, **{ch.section: entries})
    if nodes:
        new = dataclasses.replace(new, nodes=_nodes_back(new, old, nodes))
    return new


def _back(new: Any, old: Any, path: tuple[str, ...]) -> Any:
    """Dataclass ``new`` with the field at ``path`` as in ``old``."""
    head = path[0]
    value = (
        getattr(old, head)
        if len(path) == 1
        else _back(getattr(new, head), getattr(old, head), path[1:])
    )
    return dataclasses.replace(new, **{head: value})


def _named(config: ClusterConfig, section: str, name: str) -> Any:
    return next(e for e in getattr(config, section) if e.name == name)


def _nodes_back(
    new: ClusterConfig, old: ClusterConfig, kept: dict[str, list[tuple[str, ...]]]
) -> tuple[NodeConfig, ...]:
    """The [[nodes]] entries with the kept keys of each node in ``kept`` as they were: such
    a node gets an entry of its own, right after the one it was listed in."""
    out: list[NodeConfig] = []
    for entry in new.nodes:
        rest = tuple(n for n in entry.names if n not in kept)
        if rest:
            out.append(entry if len(rest) == len(entry.names) else
                       dataclasses.replace(entry, names=rest))  # fmt: skip
        for name in entry.names:
            if name in kept:
                mine = dataclasses.replace(entry, names=(name,))
                was = old.node(name)
                for path in kept[name]:
                    mine = _back(mine, was, path)
                out.append(mine)
    return tuple(out)
