"""The accounting database: accounts, users, associations and QOS, with their limits.

What ``sacctmgr`` reads and changes (ctld/accounts/sacctmgr_words.py parses its requests). The
records live in the store's ``accounting`` table, one JSON document per record; ctld
keeps them in memory and writes a change through the one commit path before it is
installed. The config's ``[[accounts]]`` and ``[[qos]]`` seed it: an entry is created
(in memory) when the store has no record of that name, and a record the store has wins
(sacctmgr's changes win over the config from the moment they are made).

Everything ctld decides from accounting reads it here: the fair-share tree
(``share_tree``), operators (``admin_level``), the QOS table (``qos``: the one
``QosConfig`` per QOS that priorities and preemption read), the limits the scheduling
core enforces (``limit_set``, plain data) and the submit-time checks (``check_submit``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.config import ClusterConfig, QosConfig
from corral.errors import AccountingPolicy, InvalidAccount, InvalidQos
from corral.slurmfmt import UNLIMITED
from ctld.sched.fairshare import AccountShare
from ctld.sched.model import AssocLimit, LimitSet, QosLimit, TresLimit

ROOT = "root"
ADMIN_LEVELS = ("None", "Operator", "Administrator")
TRES_ORDER = ("cpu", "mem", "gres/gpu")
NONE = -1  # an integer limit that is not set


@dataclass
class Limits:
    """An association's limits; NONE / an empty table: not set (inherited where Slurm
    inherits: MaxJobs, MaxSubmitJobs, MaxWall and MaxTRESPerJob from the parent)."""

    grp_tres: dict[str, int] = field(default_factory=dict)
    grp_jobs: int = NONE
    grp_submit_jobs: int = NONE
    max_jobs: int = NONE
    max_submit_jobs: int = NONE
    max_tres_per_job: dict[str, int] = field(default_factory=dict)
    max_wall_s: int = NONE


@dataclass
class Account:
    name: str
    description: str = ""
    organization: str = ""


@dataclass
class User:
    name: str
    default_account: str = ""
    admin_level: str = "None"


@dataclass
class Assoc:
    """An account's own association (``user`` empty: its place in the tree) or a user's
    association with an account."""

    account: str
    user: str = ""
    parent: str = ROOT  # an account's parent account; a user's is its account
    fairshare: int = 1
    limits: Limits = field(default_factory=Limits)
    qos: list[str] = field(default_factory=list)  # empty: the parent's
    default_qos: str = ""

    @property
    def key(self) -> str:
        return f"{self.account}/{self.user}"


def assoc_key(account: str, user: str) -> str:
    return f"{account}/{user}"


# ---------------------------------------------------------------- JSON documents


def _qos_doc(q: QosConfig) -> dict[str, Any]:
    return dataclasses.asdict(q)


def _qos_from(doc: dict[str, Any]) -> QosConfig:
    fields = {f.name for f in dataclasses.fields(QosConfig)}
    kw = {k: v for k, v in doc.items() if k in fields}
    for key, value in list(kw.items()):
        if isinstance(value, list):  # JSON has no tuples
            kw[key] = tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return QosConfig(**kw)


def _assoc_from(doc: dict[str, Any]) -> Assoc:
    limits = Limits(**doc.pop("limits", {}))
    return Assoc(limits=limits, **doc)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Accounting:
    def __init__(self, config: ClusterConfig) -> None:
        self.cluster = config.cluster_name
        enforce = set(config.controller.accounting_enforce)
        if "limits" in enforce:  # Slurm's rule: limits are kept per association, so a
            enforce.add("associations")  # job must name one (no -A escapes them)
        self.enforce = frozenset(enforce)
        self.accounts: dict[str, Account] = {}
        self.users: dict[str, User] = {}
        self.assocs: dict[str, Assoc] = {}  # by key "account/user" ("account/" for its own)
        self.qos: dict[str, QosConfig] = {}
        self._seed(config)

    # ------------------------------------------------------------ seeding and loading

    def _seed(self, config: ClusterConfig) -> None:
        self.accounts[ROOT] = Account(ROOT, "default root account", ROOT)
        self.assocs[assoc_key(ROOT, "")] = Assoc(ROOT, parent="")
        for a in config.accounts:
            self.accounts[a.name] = Account(a.name, a.name, a.parent or a.name)
            own = self.assocs.setdefault(assoc_key(a.name, ""), Assoc(a.name))
            own.parent = "" if a.name == ROOT else a.parent
            own.fairshare = a.shares
            for user, shares in a.users:
                self.assocs[assoc_key(a.name, user)] = Assoc(
                    a.name, user, parent=a.name, fairshare=shares
                )
                self.users.setdefault(user, User(user, default_account=a.name))
        for q in config.qos:
            self.qos[q.name] = q

    def load(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """The store's records, over the config's seeds."""
        for kind, name, data in rows:
            doc = json.loads(data)
            if kind == "account":
                self.accounts[name] = Account(**doc)
            elif kind == "user":
                self.users[name] = User(**doc)
            elif kind == "assoc":
                self.assocs[name] = _assoc_from(doc)
            elif kind == "qos":
                self.qos[name] = _qos_from(doc)
        self._drop_orphans()

    def _drop_orphans(self) -> None:
        """A seed whose account was deleted with sacctmgr is gone with it."""
        for key in [k for k, a in self.assocs.items() if a.account not in self.accounts]:
            del self.assocs[key]

    def clone(self) -> Accounting:
        return copy.deepcopy(self)

    # ------------------------------------------------------------ documents for the store

    def record(self, kind: str, name: str) -> tuple[str, str, str]:
        if kind == "account":
            doc: Any = dataclasses.asdict(self.accounts[name])
        elif kind == "user":
            doc = dataclasses.asdict(self.users[name])
        elif kind == "assoc":
            doc = dataclasses.asdict(self.assocs[name])
        else:
            doc = _qos_doc(self.qos[name])
        return kind, name, _dumps(doc)

    # ------------------------------------------------------------ what ctld reads

    def qos_table(self) -> tuple[QosConfig, ...]:
        return tuple(self.qos[n] for n in sorted(self.qos))

    def admin_level(self, user: str) -> str:
        u = self.users.get(user)
        return u.admin_level if u else "None"

    def share_tree(self) -> list[AccountShare]:
        users: dict[str, list[tuple[str, int]]] = {}
        for a in self.assocs.values():
            if a.user:
                users.setdefault(a.account, []).append((a.user, a.fairshare))
        out = []
        for key in sorted(self.assocs):
            a = self.assocs[key]
            if a.user:
                continue
            out.append(
                AccountShare(
                    a.account,
                    "" if a.account == ROOT else (a.parent or ROOT),
                    a.fairshare,
                    tuple(sorted(users.get(a.account, []))),
                )
            )
        return out

    def chain(self, account: str, user: str) -> list[Assoc]:
        """The user's association in ``account`` (if any), then the account's up to root."""
        out: list[Assoc] = []
        if (mine := self.assocs.get(assoc_key(account, user))) is not None:
            out.append(mine)
        at = account if account in self.accounts else ROOT
        seen: set[str] = set()
        while at and at not in seen:
            seen.add(at)
            own = self.assocs.get(assoc_key(at, ""))
            if own is None:
                break
            out.append(own)
            at = own.parent
        return out

    def _inherited(self, chain: list[Assoc], attr: str) -> Any:
        for a in chain:
            value = getattr(a.limits, attr)
            if value not in (NONE, {}):
                return value
        return NONE if attr not in ("max_tres_per_job",) else {}

    def allowed_qos(self, chain: list[Assoc]) -> list[str] | None:
        """The QOS list of the nearest association that has one; None: every QOS (no
        association sets a list, corral's default, so that a config's [[qos]] works
        without one)."""
        for a in chain:
            if a.qos:
                return a.qos
        return None

    def default_qos(self, chain: list[Assoc]) -> str:
        for a in chain:
            if a.default_qos:
                return a.default_qos
        return ""

    # ------------------------------------------------------------ the scheduler's limits

    def limit_set(self) -> LimitSet:
        """Every association's and QOS's limits as the core's plain data (effective:
        MaxJobs and MaxWall inherited from the parent where Slurm inherits them)."""
        limits = "limits" in self.enforce
        assocs = []
        for key, a in sorted(self.assocs.items()):
            chain = self.chain(a.account, a.user) if a.user else self.chain(a.account, "")
            parent = assoc_key(a.account, "") if a.user else assoc_key(a.parent, "")
            if a.account == ROOT and not a.user:
                parent = ""
            lim = a.limits
            assocs.append(
                AssocLimit(
                    key=key,
                    parent=parent,
                    grp=_tres(lim.grp_tres) if limits else TresLimit(),
                    grp_jobs=lim.grp_jobs if limits else NONE,
                    max_jobs=self._inherited(chain, "max_jobs") if limits else NONE,
                    max_wall_s=self._inherited(chain, "max_wall_s") if limits else NONE,
                )
            )
        qos = [
            QosLimit(
                name=q.name,
                grp=_tres(dict(q.grp_tres)),
                grp_jobs=q.grp_jobs or NONE,
                per_user=_tres(dict(q.max_tres_per_user)),
                max_wall_s=q.max_wall_s,
            )
            for q in self.qos_table()
            if limits and (q.grp_tres or q.grp_jobs or q.max_tres_per_user or q.max_wall_s >= 0)
        ]
        if not qos and not any(
            a.grp != TresLimit() or a.grp_jobs >= 0 or a.max_jobs >= 0 or a.max_wall_s >= 0
            for a in assocs
        ):
            return LimitSet()  # nothing limited: the core skips counting altogether
        return LimitSet(assocs=tuple(assocs), qos=tuple(qos))

    # ------------------------------------------------------------ submit time

    def enforces_associations(self) -> bool:
        """Whether a job must name an association of its user: with ``associations``
        enforced, once the database has an account besides root or a user. A fresh
        cluster (root alone) takes every job, as Slurm does without accounting storage."""
        return "associations" in self.enforce and (len(self.assocs) > 1 or bool(self.users))

    def submit_account(self, user: str, account: str) -> str:
        """The account a job is charged to: its -A, else the user's DefaultAccount, else
        root; refused (Slurm's message) when associations are enforced and the user has
        no association there."""
        if not account:
            u = self.users.get(user)
            # a user with no DefaultAccount is charged to root (fair-share, sshare and
            # the reports put her there): the job says so too, in every view
            account = (u.default_account if u else "") or ROOT
        if self.enforces_associations() and (
            not account or assoc_key(account, user) not in self.assocs
        ):
            raise InvalidAccount()
        return account

    def submit_qos(self, user: str, account: str, qos: str) -> str:
        """The job's QOS: its --qos, else the association's DefaultQOS, else normal;
        with qos enforced it must be one the association may use."""
        chain = self.chain(account, user)
        chosen = qos or self.default_qos(chain) or "normal"
        if chosen not in self.qos:
            raise InvalidQos()
        allowed = self.allowed_qos(chain)
        if "qos" in self.enforce and allowed is not None and chosen not in allowed:
            raise InvalidQos()
        return chosen

    def max_wall(self, account: str, user: str, qos: str) -> int:
        """The MaxWall a job of (account, user, qos) may ask for (UNLIMITED: none)."""
        if "limits" not in self.enforce:
            return UNLIMITED
        walls = [w for w in (self._inherited(self.chain(account, user), "max_wall_s"),) if w >= 0]
        q = self.qos.get(qos)
        if q is not None and q.max_wall_s >= 0:
            walls.append(q.max_wall_s)
        return min(walls) if walls else UNLIMITED

    def check_submit(
        self,
        *,
        account: str,
        user: str,
        qos: str,
        time_limit_s: int,
        tres: dict[str, int],
        new_jobs: int,
        active: Mapping[tuple[str, str, str], int],
    ) -> None:
        """Submit-time limits: MaxWall, MaxTRESPerJob (association and QOS), MaxSubmitJobs,
        GrpSubmitJobs and the QOS's MaxSubmitJobsPerUser. ``active`` counts the pending
        and running jobs by (account, user, qos). Raises AccountingPolicy (Slurm's
        message)."""
        if "limits" not in self.enforce:
            return
        chain = self.chain(account, user)
        q = self.qos.get(qos)
        wall = self.max_wall(account, user, qos)
        if wall >= 0 and (time_limit_s < 0 or time_limit_s > wall):
            raise AccountingPolicy()
        per_job = [self._inherited(chain, "max_tres_per_job")]
        if q is not None:
            per_job.append(dict(q.max_tres_per_job))
        for table in per_job:
            for name, limit in table.items():
                if tres.get(name, 0) > limit:
                    raise AccountingPolicy()
        max_submit = self._inherited(chain, "max_submit_jobs")
        user_submit = q.max_submit_jobs_per_user if q is not None else 0
        groups = [a for a in chain if a.limits.grp_submit_jobs >= 0]
        if max_submit < 0 and not user_submit and not groups:
            return
        in_assoc = in_qos = 0
        in_group = dict.fromkeys((a.key for a in groups), 0)
        for (job_account, job_user, job_qos), count in active.items():
            if job_user == user and job_account == account:
                in_assoc += count
            if job_user == user and job_qos == qos:
                in_qos += count
            if in_group:
                for a in self.chain(job_account, job_user):
                    if a.key in in_group:
                        in_group[a.key] += count
        if max_submit >= 0 and in_assoc + new_jobs > max_submit:
            raise AccountingPolicy()
        if user_submit and in_qos + new_jobs > user_submit:
            raise AccountingPolicy()
        for a in groups:
            if in_group[a.key] + new_jobs > a.limits.grp_submit_jobs:
                raise AccountingPolicy()


def _tres(table: dict[str, int]) -> TresLimit:
    return TresLimit(
        cpus=table.get("cpu", NONE), mem_mb=table.get("mem", NONE), gpus=table.get("gres/gpu", NONE)
    )
