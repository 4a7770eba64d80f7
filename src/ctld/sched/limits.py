"""Limits in a pass: what the running jobs hold per association and QOS, and whether one
more job would go over a limit (then it waits, with Slurm's reason). ``Admission`` is
what the pass asks: the QOS's jobs per user first, then the accounting limits.

Association limits apply along the job's chain (its user association, its account and
the accounts above it): a ``Grp`` limit counts the running jobs of the whole subtree,
``MaxJobs`` those of the user association. QOS limits count the QOS's running jobs, or
one user's within it. Pure: the limits arrive as data in the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.reasons import Reason
from ctld.sched.model import (
    AssocLimit,
    JobRequest,
    LimitSet,
    QosLimit,
    RunningView,
    Snapshot,
    TresLimit,
)
from ctld.sched.shape import Shape

# (cpus, mem, gpus, jobs)
Use = list[int]


def _zero() -> Use:
    return [0, 0, 0, 0]


def _over(limit: TresLimit, held: Use, want: tuple[int, int, int]) -> int:
    """Which of (cpus, mem, gpus) one more job would take over ``limit``: 0, 1, 2; -1 none."""
    for i, cap in enumerate((limit.cpus, limit.mem_mb, limit.gpus)):
        if cap >= 0 and want[i] and held[i] + want[i] > cap:
            return i
    return -1


_ASSOC_GRP = (Reason.ASSOC_GRP_CPU, Reason.ASSOC_GRP_MEM, Reason.ASSOC_GRP_GRES)
_QOS_GRP = (Reason.QOS_GRP_CPU, Reason.QOS_GRP_MEM, Reason.QOS_GRP_GRES)
_QOS_USER = (
    Reason.QOS_MAX_CPU_PER_USER,
    Reason.QOS_MAX_MEM_PER_USER,
    Reason.QOS_MAX_GRES_PER_USER,
)


def shape_tres(shape: Shape) -> tuple[int, int, int]:
    return (
        shape.nodes * shape.cpus_per_node,
        shape.nodes * shape.mem_per_node_mb,
        shape.nodes * shape.gpus_per_node,
    )


class LimitTracker:
    def __init__(self, limits: LimitSet, running: Iterable[RunningView]) -> None:
        self.assocs: dict[str, AssocLimit] = {a.key: a for a in limits.assocs}
        self.qos: dict[str, QosLimit] = {q.name: q for q in limits.qos}
        self.active = bool(self.assocs or self.qos)
        self.assoc_use: dict[str, Use] = {}
        self.qos_use: dict[str, Use] = {}
        self.qos_user_use: dict[tuple[str, str], Use] = {}
        self._chains: dict[tuple[str, str], tuple[AssocLimit, ...]] = {}
        if not self.active:
            return
        for run in running:
            tres = (
                sum(p.cpus for p in run.placements),
                sum(p.mem_mb for p in run.placements),
                sum(len(p.gpu_indices) for p in run.placements),
            )
            self._charge(run.account, run.user, run.qos, tres)

    def chain(self, account: str, user: str) -> tuple[AssocLimit, ...]:
        key = (account, user)
        found = self._chains.get(key)
        if found is not None:
            return found
        out: list[AssocLimit] = []
        mine = self.assocs.get(f"{account}/{user}")
        at = f"{account}/"
        if mine is not None:
            out.append(mine)
            at = mine.parent
        if at not in self.assocs:
            at = "root/"
        seen: set[str] = set()
        while at and at not in seen and (a := self.assocs.get(at)) is not None:
            seen.add(at)
            out.append(a)
            at = a.parent
        self._chains[key] = found = tuple(out)
        return found

    def _charge(self, account: str, user: str, qos: str, tres: tuple[int, int, int]) -> None:
        add = (*tres, 1)
        for a in self.chain(account, user):
            use = self.assoc_use.setdefault(a.key, _zero())
            for i, v in enumerate(add):
                use[i] += v
        if qos in self.qos:
            for use in (
                self.qos_use.setdefault(qos, _zero()),
                self.qos_user_use.setdefault((qos, user), _zero()),
            ):
                for i, v in enumerate(add):
                    use[i] += v

    def blocked(self, req: JobRequest, shape: Shape) -> str:
        """The limit one more running ``req`` would break ("" if none)."""
        if not self.active:
            return ""
        tres = shape_tres(shape)
        chain = self.chain(req.account, req.user)
        q = self.qos.get(req.qos)
        if q is not None and q.max_wall_s >= 0 and not 0 <= req.time_limit_s <= q.max_wall_s:
            return Reason.QOS_MAX_WALL
        if chain and chain[0].max_wall_s >= 0 and not 0 <= req.time_limit_s <= chain[0].max_wall_s:
            return Reason.ASSOC_MAX_WALL
        for i, a in enumerate(chain):
            use = self.assoc_use.get(a.key) or _zero()
            which = _over(a.grp, use, tres)
            if which >= 0:
                return _ASSOC_GRP[which]
            if a.grp_jobs >= 0 and use[3] + 1 > a.grp_jobs:
                return Reason.ASSOC_GRP_JOBS
            mine = i == 0 and a.key.endswith(f"/{req.user}")
            if mine and a.max_jobs >= 0 and use[3] + 1 > a.max_jobs:
                return Reason.ASSOC_MAX_JOBS
        if q is not None:
            use = self.qos_use.get(q.name) or _zero()
            if q.grp_jobs >= 0 and use[3] + 1 > q.grp_jobs:
                return Reason.QOS_GRP_JOBS
            which = _over(q.grp, use, tres)
            if which >= 0:
                return _QOS_GRP[which]
            which = _over(q.per_user, self.qos_user_use.get((q.name, req.user)) or _zero(), tres)
            if which >= 0:
                return _QOS_USER[which]
        return ""

    def start(self, req: JobRequest, shape: Shape) -> None:
        if self.active:
            self._charge(req.account, req.user, req.qos, shape_tres(shape))


class Admission:
    """Whether a job may start by the limits, kept up to date as jobs start in the pass:
    the QOS's jobs per user (``Settings.qos_max_jobs_per_user``), then the accounting
    limits (``LimitTracker``)."""

    def __init__(self, snap: Snapshot) -> None:
        self.per_user = dict(snap.settings.qos_max_jobs_per_user)
        self.user_jobs: dict[tuple[str, str], int] = {}
        for run in snap.running:
            key = (run.qos, run.user)
            self.user_jobs[key] = self.user_jobs.get(key, 0) + 1
        self.limits = LimitTracker(snap.limits, snap.running)

    def refusal(self, req: JobRequest, shape: Shape) -> str:
        """The limit one more running ``req`` would break ("" if none)."""
        limit = self.per_user.get(req.qos, 0)
        if limit and self.user_jobs.get((req.qos, req.user), 0) >= limit:
            return Reason.QOS_MAX_JOBS_PER_USER
        return self.limits.blocked(req, shape)

    def started(self, req: JobRequest, shape: Shape) -> None:
        key = (req.qos, req.user)
        self.user_jobs[key] = self.user_jobs.get(key, 0) + 1
        self.limits.start(req, shape)
