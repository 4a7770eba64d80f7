"""A reconfigure applied to the running ctld: the one place that knows what each
section's keys feed (docs/admin-guide.md#reconfigure says what each change does).

Two steps, so that nothing is ever half-applied: ``prepare`` makes everything the new
config needs (the accounting database seeded again, the policy's uids, the scheduler's
settings) and may fail, changing nothing; the ``Applier`` it returns only assigns what
was made, on the event loop, in one go (no await: no request sees a mix of the two
configs). Running jobs are untouched: their allocations, limits and partitions stay as
they started (Slurm's rule: a partition limit lowered below a running job does not
end it). Pending jobs meet the new config at the next scheduling pass (a wake-up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from corral.config import ClusterConfig
from corral.log import set_level
from ctld.core.state import State, StoredNodes
from ctld.model.accounting import Accounting
from ctld.model.authz import Policy
from ctld.planning.snapshot import settings_from

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ctld.control.cluster import Cluster


def running_config(state: State, file_config: ClusterConfig) -> ClusterConfig:
    """What ctld runs with for ``file_config``: the file's, with each dynamic node in the
    partitions it joined (ctld/fleet/dynamic.py) while the config's [dynamic_nodes] still lets
    it (those it names, else the default partition)."""
    dynamic = [n.name for n in state.nodes.values() if n.dynamic]
    if not dynamic:
        return file_config
    default = file_config.default_partition
    joins = set(file_config.dynamic_nodes.partitions) or ({default.name} if default else set())
    return dataclasses.replace(
        file_config,
        partitions=tuple(
            dataclasses.replace(p, nodes=(*p.nodes, *(n for n in dynamic if n not in p.nodes)))
            if p.name in joins
            else p
            for p in file_config.partitions
        ),
    )


@dataclass
class Applier:
    """What ``prepare`` made, and the assignments that put it in place."""

    steps: list[Callable[[], None]]

    def __call__(self) -> None:
        for step in self.steps:
            step()


def prepare(
    cluster: Cluster,
    config: ClusterConfig,
    accounting_rows: Iterable[tuple[str, str, str]],
    kept: StoredNodes,
) -> Applier:
    """Everything ``config`` (ctld's running config to be: ``running_config``) needs, made
    now; nothing changes until the Applier runs. ``accounting_rows``: sacctmgr's records
    (the store's), which win over the config's seeds as at a start; ``kept``: what the
    store keeps of nodes the config adds."""
    st = cluster.state
    old = st.config
    acc = Accounting(config)  # the config's [[accounts]] and [[qos]] seed it again
    acc.load(accounting_rows)
    ctl = config.controller
    roles = Policy.lists(ctl.operators, ctl.administrators, ctl.private_data)
    mail_on = config.mail.enabled

    def nodes_and_partitions() -> None:
        st.config = config
        st.install_nodes(config, kept)
        st.reservations.config = config
        idle = cluster.power.idle_since  # a node gone is no longer timed for power saving
        for name in [n for n in idle if n not in st.nodes]:
            del idle[name]

    def accounting() -> None:
        st.acct.qos.cluster_mode = config.scheduler.preempt_mode  # read by the new views
        st.install_accounting(acc)  # the QOS table, tree and limits; wakes the scheduler

    def priorities() -> None:
        st.acct.priorities.reconfigure(st.config)
        if config.priority != old.priority:
            st.acct.ledger.set_priority(config.priority, st.clock())

    def policy() -> None:
        cluster.policy.operator_uids, cluster.policy.admin_uids, cluster.policy.private_data = roles

    def scheduler() -> None:  # after the accounting: its QOS limits are in the settings
        cluster.settings = cluster.snapshots.settings = settings_from(st)

    def mail() -> None:
        cluster.mailer.config = cluster.mail.config = config.mail
        observing = cluster.mail in st.observers
        if mail_on and not observing:
            st.observers.append(cluster.mail)
        elif observing and not mail_on:
            st.observers.remove(cluster.mail)

    def logging() -> None:
        if config.controller.log_level != old.controller.log_level:
            set_level(config.controller.log_level)  # else --log-level's stays

    return Applier([nodes_and_partitions, accounting, priorities, policy, scheduler, mail, logging])
