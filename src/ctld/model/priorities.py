"""Job priorities from the config's weights, the share tree and the usage ledger.

Recomputed for the whole queue at most every ``RECALC_S`` (Slurm's PriorityCalcPeriod
does the same, for the same reason: age moves every second, and re-ranking ten
thousand jobs on every pass buys nothing); the scheduler walks a deep queue in slices,
one per pass (``scheduling.RECALC_SLICE``). A new job gets its priority at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from corral.config import ClusterConfig, QosConfig
from corral.wire import corral_pb2 as pb
from ctld.model.usage import UsageLedger
from ctld.sched.fairshare import AccountShare, ShareRow, factor_of, share_rows
from ctld.sched.priority import Factors, Weights, factors

RECALC_S = 30.0


def weights_of(config: ClusterConfig) -> Weights:
    p = config.priority
    return Weights(
        age=p.weight_age,
        fairshare=p.weight_fairshare,
        job_size=p.weight_job_size,
        partition=p.weight_partition,
        qos=p.weight_qos,
        max_age_s=p.max_age_s,
        favor_small=p.favor_small,
    )


class Priorities:
    def __init__(self, config: ClusterConfig, ledger: UsageLedger) -> None:
        self.config = config
        self.ledger = ledger
        self.weights = weights_of(config)
        self.tiers = {p.name: p.priority_tier for p in config.partitions}
        self.max_tier = max(self.tiers.values(), default=1)
        self.qos_priority = {q.name: q.priority for q in config.qos}
        self.max_qos = max(self.qos_priority.values(), default=0)
        self.tree = self._tree(config)
        self.rows: list[ShareRow] = []
        # each (account, user)'s fair-share factor from ``rows`` (cleared with them)
        self._factor_of: dict[tuple[str, str], float] = {}
        self.last_calc = -1e18
        self.cluster_cpus = 0

    def reconfigure(self, config: ClusterConfig) -> None:
        """The weights and partition tiers of ``config`` (a reconfigure), used from the next
        recalculation on, which is due at once; QOSes and the tree come with the
        accounting database (``set_qos``, ``set_tree``)."""
        self.config = config
        self.weights = weights_of(config)
        self.tiers = {p.name: p.priority_tier for p in config.partitions}
        self.max_tier = max(self.tiers.values(), default=1)
        self.last_calc = -1e18

    @staticmethod
    def _tree(config: ClusterConfig) -> list[AccountShare]:
        accounts = [AccountShare(a.name, a.parent, a.shares, a.users) for a in config.accounts]
        if not any(a.name == "root" for a in accounts):
            accounts.append(AccountShare("root", "", 1))
        return accounts

    def set_qos(self, qos: Iterable[QosConfig]) -> None:
        self.qos_priority = {q.name: q.priority for q in qos}
        self.max_qos = max(self.qos_priority.values(), default=0)
        self.last_calc = -1e18

    def set_tree(self, tree: Iterable[AccountShare]) -> None:
        """The share tree from the accounting database (sacctmgr's accounts, users and
        Fairshare); jobs' associations are added again by ``with_users``."""
        accounts = list(tree)
        if not any(a.name == "root" for a in accounts):
            accounts.append(AccountShare("root", "", 1))
        self.tree = accounts
        self.last_calc = -1e18

    def with_users(self, seen: Iterable[tuple[str, str]]) -> None:
        """Give (account, user) pairs met in jobs an association of 1 share if they lack one.

        Without accounts in the config every user is a child of root with one share:
        plain per-user fair-share, which is what a small lab expects.
        """
        known = {(a.name, u) for a in self.tree for u, _ in a.users}
        names = {a.name for a in self.tree}
        changed = False
        for account, user in seen:
            acct = account if account in names else "root"
            if (acct, user) not in known:
                known.add((acct, user))
                self.tree = [
                    AccountShare(a.name, a.parent, a.shares, (*a.users, (user, 1)))
                    if a.name == acct
                    else a
                    for a in self.tree
                ]
                changed = True
        if changed:
            self.last_calc = -1e18
            self._factor_of = {}

    def recalc_due(self, now: float) -> bool:
        return now - self.last_calc >= RECALC_S

    def refresh(self, now: float, running: Sequence[pb.Job]) -> None:
        names = {a.name for a in self.tree}
        usage: dict[tuple[str, str], float] = {}
        for (account, user), value in self.ledger.snapshot(now, running).items():
            key = (account if account in names else "root", user)
            usage[key] = usage.get(key, 0.0) + value
        self.rows = share_rows(self.tree, usage)
        self._factor_of = {}
        self.last_calc = now

    def fairshare(self, account: str, user: str) -> float:
        got = self._factor_of.get((account, user))
        if got is None:
            names = {a.name for a in self.tree}
            got = factor_of(self.rows, account if account in names else "root", user)
            self._factor_of[(account, user)] = got
        return got

    def factors(self, job: pb.Job, now: float) -> Factors:
        part = job.spec.partitions[0] if job.spec.partitions else job.partition
        return factors(
            self.weights,
            age_s=now - max(job.submit_time, job.eligible_time),
            fairshare=self.fairshare(job.account, job.user),
            cpus=job.num_cpus,
            cluster_cpus=self.cluster_cpus,
            partition_tier=self.tiers.get(part, 1),
            max_partition_tier=self.max_tier,
            qos_priority=self.qos_priority.get(job.qos or "normal", 0),
            max_qos_priority=self.max_qos,
            nice=job.spec.nice,
        )


def apply_factors(job: pb.Job, f: Factors) -> bool:
    """Store ``f`` on the job; True when anything a reader sees changed."""
    priority = job.admin_priority if job.HasField("admin_priority") else f.priority
    # set in place, field by field: the whole queue goes through here every 30 s
    pf = job.priority_factors
    new = (
        round(f.age, 4),
        round(f.fairshare, 4),
        round(f.job_size, 4),
        round(f.partition, 4),
        round(f.qos, 4),
        f.nice,
    )
    if (
        job.priority == priority
        and (
            pf.age,
            pf.fairshare,
            pf.job_size,
            pf.partition,
            pf.qos,
            pf.nice,
        )
        == new
    ):
        return False
    job.priority = max(priority, 1)  # 0 means held, as in Slurm
    pf.age, pf.fairshare, pf.job_size, pf.partition, pf.qos, pf.nice = new
    return True
