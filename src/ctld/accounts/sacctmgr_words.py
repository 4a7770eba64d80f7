"""sacctmgr's words: what follows the entity, parsed with Slurm's rules, and its values.

``parse_args`` splits names, ``where`` conditions and ``set`` settings; the value
parsers read limits, TRES lists, wall times and admin levels with Slurm's messages;
``apply_assoc``/``apply_qos`` write a request's settings into an association or a QOS
(of a copy of the database: sacctmgr_ops.py commits and installs it); ``select_assocs``
is the associations a request's conditions name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.config import PREEMPT_MODES, QosConfig, preempt_loop
from corral.errors import CorralError, InvalidRequest
from corral.slurmfmt import parse_duration
from ctld.model.accounting import ADMIN_LEVELS, NONE, ROOT, TRES_ORDER, Accounting, Assoc, assoc_key

# the command maps Slurm's spellings (accounts, acct, associations...) to these
ENTITIES = ("account", "user", "assoc", "qos")

# lower-case spellings -> the canonical key
KEYS = {
    "name": "Name",
    "names": "Name",
    "account": "Account",
    "accounts": "Account",
    "acct": "Account",
    "user": "User",
    "users": "User",
    "parent": "Parent",
    "parentname": "Parent",
    "description": "Description",
    "desc": "Description",
    "organization": "Organization",
    "org": "Organization",
    "fairshare": "Fairshare",
    "share": "Fairshare",
    "shares": "Fairshare",
    "grptres": "GrpTRES",
    "grpjobs": "GrpJobs",
    "grpsubmitjobs": "GrpSubmitJobs",
    "grpsubmit": "GrpSubmitJobs",
    "maxjobs": "MaxJobs",
    "maxsubmitjobs": "MaxSubmitJobs",
    "maxsubmit": "MaxSubmitJobs",
    "maxtres": "MaxTRESPerJob",
    "maxtresperjob": "MaxTRESPerJob",
    "maxtrespj": "MaxTRESPerJob",
    "maxtresperuser": "MaxTRESPerUser",
    "maxtrespu": "MaxTRESPerUser",
    "maxwall": "MaxWall",
    "maxwalldurationperjob": "MaxWall",
    "defaultaccount": "DefaultAccount",
    "defaultacct": "DefaultAccount",
    "defaultqos": "DefaultQOS",
    "qos": "QOS",
    "qoslevel": "QOS",
    "adminlevel": "AdminLevel",
    "admin": "AdminLevel",
    "priority": "Priority",
    "preempt": "Preempt",
    "preemptmode": "PreemptMode",
    "gracetime": "GraceTime",
    "usagefactor": "UsageFactor",
    "maxjobsperuser": "MaxJobsPerUser",
    "maxjobspu": "MaxJobsPerUser",
    "maxsubmitjobsperuser": "MaxSubmitJobsPerUser",
    "maxsubmitpu": "MaxSubmitJobsPerUser",
    "cluster": "Cluster",
    "clusters": "Cluster",
}

ASSOC_SETTINGS = frozenset(
    {
        "Fairshare",
        "GrpTRES",
        "GrpJobs",
        "GrpSubmitJobs",
        "MaxJobs",
        "MaxSubmitJobs",
        "MaxTRESPerJob",
        "MaxWall",
        "QOS",
        "DefaultQOS",
    }
)
SETTINGS = {
    "account": ASSOC_SETTINGS | {"Description", "Organization", "Parent"},
    "user": ASSOC_SETTINGS | {"Account", "DefaultAccount", "AdminLevel"},
    "assoc": ASSOC_SETTINGS | {"Parent"},
    "qos": frozenset(
        {
            "Description",
            "Priority",
            "Preempt",
            "PreemptMode",
            "GraceTime",
            "UsageFactor",
            "MaxWall",
            "MaxTRESPerUser",
            "MaxTRESPerJob",
            "MaxJobsPerUser",
            "MaxSubmitJobsPerUser",
            "GrpTRES",
            "GrpJobs",
        }
    ),
}
CONDITIONS = {
    "account": frozenset({"Name", "Cluster", "Parent"}),
    "user": frozenset({"Name", "Account", "Cluster", "AdminLevel", "DefaultAccount"}),
    "assoc": frozenset({"Account", "User", "Cluster", "Parent"}),
    "qos": frozenset({"Name"}),
}


@dataclass
class Value:
    op: str  # "", "+" or "-" (QOS+=x, QOS-=x)
    text: str


@dataclass
class Parsed:
    names: list[str] = field(default_factory=list)
    where: dict[str, Value] = field(default_factory=dict)
    sets: dict[str, Value] = field(default_factory=dict)


def parse_args(action: str, entity: str, args: Iterable[str]) -> Parsed:
    """Slurm's syntax: bare words are names; ``where`` and ``set`` switch between
    conditions and settings (add: everything is a setting; modify: conditions until
    ``set``; list/delete: conditions)."""
    out = Parsed()
    mode = "set" if action == "add" else "where"
    for word in args:
        low = word.lower()
        if low == "where":
            mode = "where"
            continue
        if low == "set":
            if action != "modify":
                raise InvalidRequest(f" Unknown option: {word}\n Use keyword 'where' to modify")
            mode = "set"
            continue
        if "=" not in word:
            out.names.extend(n for n in word.split(",") if n)
            continue
        raw, _, text = word.partition("=")
        op = ""
        if raw.endswith(("+", "-")):
            raw, op = raw[:-1], raw[-1]
        key = KEYS.get(raw.lower())
        if key == "Name":
            out.names.extend(n for n in text.split(",") if n)
            continue
        allowed = SETTINGS[entity] if mode == "set" else CONDITIONS[entity]
        if key is None or key not in allowed:
            raise InvalidRequest(f" Unknown option: {word}")
        (out.sets if mode == "set" else out.where)[key] = Value(op, text)
    return out


# ---------------------------------------------------------------- values


def _int_limit(key: str, text: str) -> int:
    if text.strip().lower() in ("-1", "none", "", "unlimited"):
        return NONE
    try:
        value = int(text)
    except ValueError:
        raise InvalidRequest(f" Bad {key} value: {text}") from None
    if value < 0:
        raise InvalidRequest(f" Bad {key} value: {text}")
    return value


def _mem_mb(text: str) -> int:
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    t = text.strip().lower()
    mult = units.get(t[-1:], 0) if t else 0
    number = t[:-1] if mult else t
    return int(float(number) * (mult or 1))


def parse_tres(key: str, text: str, current: dict[str, int]) -> dict[str, int]:
    """``cpu=4,mem=10G,gres/gpu=4`` merged into ``current``; ``-1`` clears one (or, alone,
    all of them), as Slurm's TRES limits."""
    if text.strip() in ("-1", ""):
        return {}
    out = dict(current)
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        name = {"gpu": "gres/gpu", "memory": "mem"}.get(name, name)
        if not sep or name not in TRES_ORDER:
            raise InvalidRequest(f" Bad {key} value: {text} (cpu, mem, gres/gpu)")
        try:
            amount = (
                -1 if value.strip() == "-1" else (_mem_mb(value) if name == "mem" else int(value))
            )
        except ValueError:
            raise InvalidRequest(f" Bad {key} value: {text}") from None
        if amount < 0:
            out.pop(name, None)
        else:
            out[name] = amount
    return out


def format_tres(table: dict[str, int] | Iterable[tuple[str, int]]) -> str:
    items = dict(table)
    out = []
    for name in TRES_ORDER:
        if name in items:
            value = items[name]
            shown = str(value)
            if name == "mem":
                shown = f"{value // 1024}G" if value and value % 1024 == 0 else f"{value}M"
            out.append(f"{name}={shown}")
    return ",".join(out)


def _wall(key: str, text: str) -> int:
    if text.strip().lower() in ("-1", "none", ""):
        return NONE
    try:
        return parse_duration(text, what=key)
    except CorralError:
        raise InvalidRequest(f" Bad {key} value: {text}") from None


def admin_level(text: str) -> str:
    low = text.strip().lower()
    for level in ADMIN_LEVELS:
        if level.lower().startswith(low[:5]) and low:
            return level
    raise InvalidRequest(f" Bad AdminLevel value: {text} (None, Operator or Administrator)")


def _fairshare(text: str) -> int:
    value = _int_limit("Fairshare", text)
    return 1 if value == NONE else value


def _qos_list(acc: Accounting, value: Value, current: list[str]) -> list[str]:
    names = [n for n in value.text.split(",") if n]
    for n in names:
        if n not in acc.qos:
            raise InvalidRequest(f" Invalid qos: {n}")
    if value.op == "+":
        return current + [n for n in names if n not in current]
    if value.op == "-":
        return [n for n in current if n not in names]
    return names


# ---------------------------------------------------------------- selections


def where_list(p: Parsed, key: str) -> list[str]:
    value = p.where.get(key)
    return [v for v in value.text.split(",") if v] if value else []


def select_accounts(acc: Accounting, p: Parsed) -> list[str]:
    names = p.names
    if not names:
        raise InvalidRequest(" No conditions given")
    missing = [n for n in names if n not in acc.accounts]
    if missing:
        raise InvalidRequest(f" The account '{missing[0]}' doesn't exist")
    return names


def select_users(acc: Accounting, p: Parsed) -> list[str]:
    names = p.names
    if not names:
        raise InvalidRequest(" No conditions given")
    missing = [n for n in names if n not in acc.users]
    if missing:
        raise InvalidRequest(f" The user '{missing[0]}' doesn't exist")
    return names


def select_assocs(acc: Accounting, p: Parsed) -> list[Assoc]:
    accounts = where_list(p, "Account")
    users = where_list(p, "User")
    parents = where_list(p, "Parent")
    out = []
    for key in sorted(acc.assocs):
        a = acc.assocs[key]
        if accounts and a.account not in accounts:
            continue
        if users and a.user not in users:
            continue
        if "User" in p.where and not users and a.user:  # user='' : accounts' own
            continue
        if parents and a.parent not in parents:
            continue
        out.append(a)
    return out


# ---------------------------------------------------------------- settings


def apply_assoc(acc: Accounting, a: Assoc, sets: dict[str, Value]) -> None:
    lim = a.limits
    for key, value in sets.items():
        text = value.text
        if key == "Fairshare":
            a.fairshare = _fairshare(text)
        elif key == "GrpTRES":
            lim.grp_tres = parse_tres(key, text, lim.grp_tres)
        elif key == "GrpJobs":
            lim.grp_jobs = _int_limit(key, text)
        elif key == "GrpSubmitJobs":
            lim.grp_submit_jobs = _int_limit(key, text)
        elif key == "MaxJobs":
            lim.max_jobs = _int_limit(key, text)
        elif key == "MaxSubmitJobs":
            lim.max_submit_jobs = _int_limit(key, text)
        elif key == "MaxTRESPerJob":
            lim.max_tres_per_job = parse_tres(key, text, lim.max_tres_per_job)
        elif key == "MaxWall":
            lim.max_wall_s = _wall(key, text)
        elif key == "QOS":
            inherited = acc.allowed_qos(acc.chain(a.account, ""))
            a.qos = _qos_list(acc, value, a.qos or inherited or sorted(acc.qos))
        elif key == "DefaultQOS":
            if text and text not in acc.qos:
                raise InvalidRequest(f" Invalid qos: {text}")
            a.default_qos = text
        elif key == "Parent" and not a.user:
            if text not in acc.accounts or text == a.account:
                raise InvalidRequest(f" Parent account '{text}' doesn't exist")
            at: str = text
            while at and at != ROOT:  # no cycles
                if at == a.account:
                    raise InvalidRequest(f" Can't move {a.account} under its own child")
                at = acc.assocs[assoc_key(at, "")].parent
            a.parent = text
    if a.default_qos and a.qos and a.default_qos not in a.qos:
        raise InvalidRequest(
            f" Default QOS '{a.default_qos}' is not in the QOS list {','.join(a.qos)}"
        )


def apply_qos(acc: Accounting, q: QosConfig, sets: dict[str, Value]) -> QosConfig:
    kw: dict[str, object] = {}
    for key, value in sets.items():
        text = value.text
        if key == "Description":
            kw["description"] = text
        elif key == "Priority":
            kw["priority"] = max(_int_limit(key, text), 0)
        elif key == "Preempt":
            names = _qos_list(acc, value, list(q.preempt))
            if q.name in names:
                raise InvalidRequest(f" A QOS cannot preempt itself: {q.name}")
            others = [x for n, x in acc.qos.items() if n != q.name]
            loop = preempt_loop([*others, dataclasses.replace(q, preempt=tuple(names))])
            if loop:  # jobs would take the same GPUs from each other in turn
                raise InvalidRequest(f" QOS preemption loop: {' -> '.join(loop)}")
            kw["preempt"] = tuple(names)
        elif key == "PreemptMode":
            mode = text.strip().lower()
            if mode == "cluster":
                mode = ""
            if mode not in PREEMPT_MODES:
                raise InvalidRequest(f" Bad PreemptMode value: {text} (requeue, cancel, off)")
            kw["preempt_mode"] = mode
        elif key == "GraceTime":
            kw["grace_time_s"] = (
                max(_wall(key, text), 0) if ":" in text else max(_int_limit(key, text), 0)
            )
        elif key == "UsageFactor":
            try:
                factor = float(text)
            except ValueError:
                raise InvalidRequest(f" Bad UsageFactor value: {text}") from None
            if factor < 0:
                raise InvalidRequest(f" Bad UsageFactor value: {text}")
            kw["usage_factor"] = factor
        elif key == "MaxWall":
            kw["max_wall_s"] = _wall(key, text)
        elif key == "MaxTRESPerUser":
            kw["max_tres_per_user"] = _pairs(parse_tres(key, text, dict(q.max_tres_per_user)))
        elif key == "MaxTRESPerJob":
            kw["max_tres_per_job"] = _pairs(parse_tres(key, text, dict(q.max_tres_per_job)))
        elif key == "GrpTRES":
            kw["grp_tres"] = _pairs(parse_tres(key, text, dict(q.grp_tres)))
        elif key == "MaxJobsPerUser":
            kw["max_jobs_per_user"] = max(_int_limit(key, text), 0)
        elif key == "MaxSubmitJobsPerUser":
            kw["max_submit_jobs_per_user"] = max(_int_limit(key, text), 0)
        elif key == "GrpJobs":
            kw["grp_jobs"] = max(_int_limit(key, text), 0)
    return dataclasses.replace(q, **kw)  # type: ignore[arg-type]


def _pairs(table: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(table.items()))
