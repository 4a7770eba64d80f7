"""The accounting seed: ``[[accounts]]`` (the share tree) and ``[[qos]]`` (priority,
preemption, sacctmgr's limits), with the checks across entries (cycles, preemption
loops)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.config.section import Section
from corral.errors import ConfigError
from corral.slurmfmt import UNLIMITED

PREEMPT_MODES = ("", "requeue", "cancel", "off")  # Slurm's PreemptMode, SUSPEND aside
TRES_NAMES = ("cpu", "mem", "gres/gpu")  # what accounting limits count (mem in MB)


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


def _name_ok(name: str) -> bool:
    return bool(name) and len(name) <= 64 and name.replace("-", "").replace("_", "").isalnum()


def parse_account(sec: Section) -> AccountConfig:
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


def parse_qos(sec: Section) -> QosConfig:
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


def _tres_table(sec: Section, name: str) -> tuple[tuple[str, int], ...]:
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


def check_accounts(accounts: tuple[AccountConfig, ...]) -> None:
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
