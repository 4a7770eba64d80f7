"""The QOS definitions ctld consults: one lookup for every reader.

Today they come from the config's ``[[qos]]`` sections; QOSes managed at run time
(sacctmgr) replace the set through ``replace``, and every reader (the snapshot's
preemption views, the preemption applier) sees the change on its next look. A name
without a definition reads as a QOS with the defaults (Slurm's ``normal``).
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.config import ClusterConfig, QosConfig
from ctld.sched.model import QosView

DEFAULT_QOS = "normal"


class QosTable:
    def __init__(self, config: ClusterConfig) -> None:
        # the cluster's PreemptType/PreemptMode: "off" turns preemption off everywhere
        self.cluster_mode = config.scheduler.preempt_mode
        self.version = 0  # bumped by every replace: the views are rebuilt then
        self._by_name: dict[str, QosConfig] = {}
        self._views: tuple[int, tuple[QosView, ...]] | None = None
        self.replace(config.qos)

    def replace(self, qoses: Iterable[QosConfig]) -> None:
        """Make ``qoses`` the QOS set (the config and sacctmgr refuse preemption loops
        before they get here: ``corral.config.preempt_loop``)."""
        self._by_name = {q.name: q for q in qoses}
        self.version += 1

    def get(self, name: str) -> QosConfig:
        """The QOS named ``name`` ("" is the default QOS)."""
        name = name or DEFAULT_QOS
        found = self._by_name.get(name)
        return found if found is not None else QosConfig(name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def preempt_mode(self, name: str) -> str:
        """What preempting a job of QOS ``name`` does: "requeue", "cancel" or "off"."""
        if self.cluster_mode == "off":
            return "off"
        return self.get(name).preempt_mode or self.cluster_mode

    def grace_s(self, name: str) -> int:
        return self.get(name).grace_time_s

    def views(self) -> tuple[QosView, ...]:
        """What the scheduling core needs to know of each QOS (rebuilt on a change)."""
        if self._views is not None and self._views[0] == self.version:
            return self._views[1]
        on = self.cluster_mode != "off"
        views = tuple(
            QosView(
                name=q.name,
                priority=q.priority,
                preempts=q.preempt if on else (),
                mode=self.preempt_mode(q.name),
                grace_s=q.grace_time_s,
            )
            for q in self._by_name.values()
        )
        self._views = (self.version, views)
        return views
