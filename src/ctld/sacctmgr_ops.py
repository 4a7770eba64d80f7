"""sacctmgr's requests: add, modify, delete and list accounts, users, associations, QOS.

The command sends its words after the entity as they were typed (names, ``key=value``,
``where``, ``set``); this module parses them with Slurm's rules, checks who may do it,
applies a change to a copy of the accounting database, commits the copy's changed
records through the one commit step and only then installs it. The reply carries what
sacctmgr prints (Slurm's wording) and, for list/show, each record's columns by Slurm's
header names (the command picks and lays them out).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from corral.config import PREEMPT_MODES, QosConfig, preempt_loop
from corral.errors import CorralError, InvalidRequest
from corral.identity import Identity
from corral.slurmfmt import format_elapsed, parse_duration
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.accounting import (
    ADMIN_LEVELS,
    NONE,
    ROOT,
    TRES_ORDER,
    Account,
    Accounting,
    Assoc,
    Limits,
    User,
    assoc_key,
)
from ctld.authz import Policy
from ctld.commit import Change
from ctld.state import State
from ctld.store_rows import Op

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


def _admin_level(text: str) -> str:
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


def _time(seconds: int) -> str:
    return "" if seconds < 0 else format_elapsed(seconds)


def _num(value: int) -> str:
    return "" if value < 0 else str(value)


# ---------------------------------------------------------------- the operations


class SacctmgrOps:
    def __init__(self, state: State, policy: Policy) -> None:
        self.state = state
        self.policy = policy
        # one change at a time: each works on a copy of the database as it is installed
        self._lock = asyncio.Lock()

    async def execute(self, who: Identity, req: pb.SacctmgrRequest) -> pb.SacctmgrResponse:
        entity = req.entity.lower()
        if entity not in ENTITIES:
            raise InvalidRequest(f"No valid entity in {req.action} command")
        action = {"create": "add", "update": "modify", "remove": "delete", "show": "list"}.get(
            req.action, req.action
        )
        if action not in ("add", "modify", "delete", "list"):
            raise InvalidRequest(f"invalid keyword: {req.action}")
        parsed = parse_args(action, entity, req.args)
        if action == "list":
            return pb.SacctmgrResponse(records=self.records(who, entity, parsed))
        self.policy.check_operator(who, "changing the accounting database")
        async with self._lock:
            return await self._change(action, entity, parsed)

    async def _change(self, action: str, entity: str, parsed: Parsed) -> pb.SacctmgrResponse:
        self.state.store.check_writable()
        acc = self.state.accounting.clone()
        change = _Change(acc)
        handler: Callable[[_Change, Parsed], str] = getattr(self, f"_{action}_{entity}")
        message = handler(change, parsed)
        change.op.accounting_put = [acc.record(k, n) for k, n, _ in change.op.accounting_put]
        if change.op.accounting_put or change.op.accounting_delete:
            async with Change(self.state) as ch:
                ch.put(change.op)
            self.state.install_accounting(acc)
            return pb.SacctmgrResponse(message=message, changed=True)
        return pb.SacctmgrResponse(message=message)

    # ------------------------------------------------------------ add

    def _add_account(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.names:
            raise InvalidRequest(" Need name of account to add.")
        parent = p.sets["Parent"].text if "Parent" in p.sets else ROOT
        if parent not in acc.accounts:
            raise InvalidRequest(
                f" Parent account '{parent}' doesn't exist on cluster {acc.cluster}\n"
                "        Contact your admin to add this account."
            )
        desc = p.sets.get("Description")
        org = p.sets.get("Organization")
        new = [n for n in p.names if n not in acc.accounts]
        if not new:
            raise InvalidRequest(" Nothing new added.")
        lines = [" Adding Account(s)", *(f"  {n}" for n in new), " Settings"]
        lines.append(f"  Description     = {desc.text if desc else 'Account Name'}")
        lines.append(f"  Organization    = {org.text if org else 'Parent/Account Name'}")
        lines.append(" Associations")
        for name in new:
            acc.accounts[name] = Account(
                name,
                desc.text if desc else name,
                org.text if org else (parent if parent != ROOT else name),
            )
            own = Assoc(name, parent=parent)
            self._apply_assoc(acc, own, p.sets)
            acc.assocs[own.key] = own
            ch.put("account", name)
            ch.put("assoc", own.key)
            lines.append(f"  A = {name:<10.10} C = {acc.cluster:<10.10}")
        limits = _limit_lines(p.sets)
        if limits:
            lines += [" Settings", *limits]
        return "\n".join(lines)

    def _add_user(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.names:
            raise InvalidRequest(" Need name of user to add.")
        accounts = (
            [a for a in p.sets["Account"].text.split(",") if a] if "Account" in p.sets else []
        )
        default = p.sets["DefaultAccount"].text if "DefaultAccount" in p.sets else ""
        if not accounts and default:
            accounts = [default]
        if not accounts and not all(n in acc.users for n in p.names):
            raise InvalidRequest(" Need a default account for these users to add.")
        for a in accounts:
            if a not in acc.accounts:
                raise InvalidRequest(
                    f" This account '{a}' doesn't exist.\n"
                    "        Contact your admin to add this account."
                )
        level = _admin_level(p.sets["AdminLevel"].text) if "AdminLevel" in p.sets else ""
        new_users = [n for n in p.names if n not in acc.users]
        assoc_lines = []
        for name in p.names:
            if name in new_users:
                acc.users[name] = User(name, default or accounts[0], level or "None")
                ch.put("user", name)
            for a in accounts:
                key = assoc_key(a, name)
                if key in acc.assocs:
                    continue
                mine = Assoc(a, name, parent=a)
                self._apply_assoc(acc, mine, p.sets)
                acc.assocs[key] = mine
                ch.put("assoc", key)
                assoc_lines.append(f"  U = {name:<9.9} A = {a:<10.10} C = {acc.cluster:<10.10}")
        if not new_users and not assoc_lines:
            raise InvalidRequest(" Nothing new added.")
        lines: list[str] = []
        if new_users:
            lines += [" Adding User(s)", *(f"  {n}" for n in new_users)]
            settings = []
            if default or accounts:
                settings.append(f"  Default Account = {default or accounts[0]}")
            if level:
                settings.append(f"  Admin Level     = {level}")
            if settings:
                lines += [" Settings =", *settings]
        if assoc_lines:
            lines += [" Associations =", *assoc_lines]
        limits = _limit_lines(p.sets)
        if limits:
            lines += [" Non Default Settings", *limits]
        return "\n".join(lines)

    def _add_assoc(self, ch: _Change, p: Parsed) -> str:
        raise InvalidRequest(
            "No valid entity in add command\n"
            'Input line must include "Account", "QOS" or "User" (an association is made '
            "by adding a user to an account)"
        )

    def _add_qos(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.names:
            raise InvalidRequest(" Need name of qos to add.")
        new = [n for n in p.names if n not in acc.qos]
        if not new:
            raise InvalidRequest(" Nothing new added.")
        for name in new:
            acc.qos[name] = self._apply_qos(acc, QosConfig(name), p.sets)
            ch.put("qos", name)
        desc = p.sets.get("Description")
        lines = [" Adding QOS(s)", *(f"  {n}" for n in new), " Settings"]
        lines.append(f"  Description    = {desc.text if desc else 'QOS Name'}")
        return "\n".join(lines)

    # ------------------------------------------------------------ modify

    def _modify_account(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = self._accounts(acc, p)
        if not p.sets:
            raise InvalidRequest(" You didn't give me anything to set")
        lines: list[str] = []
        own = {k: v for k, v in p.sets.items() if k in ("Description", "Organization")}
        if own:
            lines.append(" Modified accounts...")
            for name in names:
                record = acc.accounts[name]
                if "Description" in own:
                    record.description = own["Description"].text
                if "Organization" in own:
                    record.organization = own["Organization"].text
                ch.put("account", name)
                lines.append(f"  {name}")
        rest = {k: v for k, v in p.sets.items() if k not in own}
        if rest:
            lines.append(" Modified account associations...")
            for name in names:
                a = acc.assocs[assoc_key(name, "")]
                self._apply_assoc(acc, a, rest)
                ch.put("assoc", a.key)
                lines.append(_modified(acc, a))
        return "\n".join(lines) if lines else " Nothing modified"

    def _modify_user(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = self._users(acc, p)
        if not p.sets:
            raise InvalidRequest(" You didn't give me anything to set")
        lines: list[str] = []
        own = {k: v for k, v in p.sets.items() if k in ("DefaultAccount", "AdminLevel")}
        if own:
            lines.append(" Modified users...")
            for name in names:
                u = acc.users[name]
                if "DefaultAccount" in own:
                    target = own["DefaultAccount"].text
                    if assoc_key(target, name) not in acc.assocs:
                        raise InvalidRequest(
                            f" Can't modify because these users aren't associated with new "
                            f"default account '{target}'...\n  U = {name} C = {acc.cluster}"
                        )
                    u.default_account = target
                if "AdminLevel" in own:
                    u.admin_level = _admin_level(own["AdminLevel"].text)
                ch.put("user", name)
                lines.append(f"  {name}")
        rest = {k: v for k, v in p.sets.items() if k not in own}
        if rest:
            accounts = self._where_list(p, "Account")
            found = [
                a
                for key, a in sorted(acc.assocs.items())
                if a.user in names and (not accounts or a.account in accounts)
            ]
            if not found:
                raise InvalidRequest(" No associations match these users")
            lines.append(" Modified user associations...")
            for a in found:
                self._apply_assoc(acc, a, rest)
                ch.put("assoc", a.key)
                lines.append(_modified(acc, a))
        return "\n".join(lines) if lines else " Nothing modified"

    def _modify_assoc(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.sets:
            raise InvalidRequest(" You didn't give me anything to set")
        found = self._assocs(acc, p)
        if not found:
            return " Nothing modified"
        lines = [" Modified account associations..."]
        for a in found:
            self._apply_assoc(acc, a, p.sets)
            ch.put("assoc", a.key)
            lines.append(_modified(acc, a))
        return "\n".join(lines)

    def _modify_qos(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.sets:
            raise InvalidRequest(" You didn't give me anything to set")
        names = p.names or sorted(acc.qos)
        for n in names:
            if n not in acc.qos:
                raise InvalidRequest(f" Invalid qos: {n}")
        lines = [" Modified qos..."]
        for n in names:
            acc.qos[n] = self._apply_qos(acc, acc.qos[n], p.sets)
            ch.put("qos", n)
            lines.append(f"  {n}")
        return "\n".join(lines)

    # ------------------------------------------------------------ delete

    def _delete_account(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = self._accounts(acc, p)
        if ROOT in names:
            raise InvalidRequest(" You are not allowed to remove the root account.")
        children = [
            a.account
            for a in acc.assocs.values()
            if not a.user and a.parent in names and a.account not in names
        ]
        if children:
            raise InvalidRequest(
                " Error with request: Job(s) active, cancel job(s) before remove\n"
                f" Please either remove the child accounts first: {','.join(sorted(children))}"
            )
        self._refuse_active(account_names=names)
        lines = [" Deleting accounts...", *(f"  {n}" for n in names)]
        for name in names:
            del acc.accounts[name]
            ch.delete("account", name)
            for key in [k for k, a in acc.assocs.items() if a.account == name]:
                del acc.assocs[key]
                ch.delete("assoc", key)
        for u in acc.users.values():
            if u.default_account in names:
                left = sorted(a.account for a in acc.assocs.values() if a.user == u.name)
                u.default_account = left[0] if left else ""
                ch.put("user", u.name)
        return "\n".join(lines)

    def _delete_user(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = self._users(acc, p)
        accounts = self._where_list(p, "Account")
        if accounts:
            keys = [
                assoc_key(a, n) for n in names for a in accounts if assoc_key(a, n) in acc.assocs
            ]
            if not keys:
                raise InvalidRequest(" Nothing deleted")
            lines = [" Deleting user associations..."]
            for key in keys:
                a = acc.assocs.pop(key)
                ch.delete("assoc", key)
                lines.append(f"  C = {acc.cluster:<10} A = {a.account:<10} U = {a.user:<9}")
                u = acc.users.get(a.user)
                if u is not None and u.default_account == a.account:
                    left = sorted(x.account for x in acc.assocs.values() if x.user == u.name)
                    u.default_account = left[0] if left else ""
                    ch.put("user", u.name)
            return "\n".join(lines)
        lines = [" Deleting users...", *(f"  {n}" for n in names)]
        for name in names:
            del acc.users[name]
            ch.delete("user", name)
            for key in [k for k, a in acc.assocs.items() if a.user == name]:
                del acc.assocs[key]
                ch.delete("assoc", key)
        return "\n".join(lines)

    def _delete_assoc(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        found = [a for a in self._assocs(acc, p) if a.user]
        if not found:
            raise InvalidRequest(" Nothing deleted")
        lines = [" Deleting user associations..."]
        for a in found:
            del acc.assocs[a.key]
            ch.delete("assoc", a.key)
            lines.append(f"  C = {acc.cluster:<10} A = {a.account:<10} U = {a.user:<9}")
        return "\n".join(lines)

    def _delete_qos(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.names:
            raise InvalidRequest(" No conditions given")
        for n in p.names:
            if n not in acc.qos:
                raise InvalidRequest(" Nothing deleted")
            if n == "normal":
                raise InvalidRequest(" You are not allowed to remove the normal QOS.")
        in_use = sorted(
            {j.qos for j in self.state.jobs.values() if j.qos in p.names and _active(j)}
        )
        if in_use:
            raise InvalidRequest(
                f" Error with request: Job(s) active, cancel job(s) before remove ({in_use[0]})"
            )
        lines = [" Deleting QOS(s)...", *(f"  {n}" for n in p.names)]
        for n in p.names:
            del acc.qos[n]
            ch.delete("qos", n)
            for a in acc.assocs.values():
                if n in a.qos or a.default_qos == n:
                    a.qos = [q for q in a.qos if q != n]
                    a.default_qos = "" if a.default_qos == n else a.default_qos
                    ch.put("assoc", a.key)
            for other in list(acc.qos.values()):
                if n in other.preempt:
                    acc.qos[other.name] = dataclasses.replace(
                        other, preempt=tuple(x for x in other.preempt if x != n)
                    )
                    ch.put("qos", other.name)
        return "\n".join(lines)

    # ------------------------------------------------------------ selection helpers

    @staticmethod
    def _where_list(p: Parsed, key: str) -> list[str]:
        value = p.where.get(key)
        return [v for v in value.text.split(",") if v] if value else []

    def _accounts(self, acc: Accounting, p: Parsed) -> list[str]:
        names = p.names
        if not names:
            raise InvalidRequest(" No conditions given")
        missing = [n for n in names if n not in acc.accounts]
        if missing:
            raise InvalidRequest(f" The account '{missing[0]}' doesn't exist")
        return names

    def _users(self, acc: Accounting, p: Parsed) -> list[str]:
        names = p.names
        if not names:
            raise InvalidRequest(" No conditions given")
        missing = [n for n in names if n not in acc.users]
        if missing:
            raise InvalidRequest(f" The user '{missing[0]}' doesn't exist")
        return names

    def _assocs(self, acc: Accounting, p: Parsed) -> list[Assoc]:
        accounts = self._where_list(p, "Account")
        users = self._where_list(p, "User")
        parents = self._where_list(p, "Parent")
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

    def _refuse_active(self, *, account_names: list[str]) -> None:
        if any(_active(j) and j.account in account_names for j in self.state.jobs.values()):
            raise InvalidRequest(" Error with request: Job(s) active, cancel job(s) before remove")

    # ------------------------------------------------------------ applying settings

    def _apply_assoc(self, acc: Accounting, a: Assoc, sets: dict[str, Value]) -> None:
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

    def _apply_qos(self, acc: Accounting, q: QosConfig, sets: dict[str, Value]) -> QosConfig:
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

    # ------------------------------------------------------------ list

    def records(self, who: Identity, entity: str, p: Parsed) -> list[pb.AcctRecord]:
        acc = self.state.accounting
        private = "accounting" in self.policy.private_data and not self.policy.is_operator(who)
        rows: list[dict[str, str]] = []
        if entity == "account":
            for name in sorted(acc.accounts):
                if p.names and name not in p.names:
                    continue
                ar = acc.accounts[name]
                rows.append({"Account": ar.name, "Descr": ar.description, "Org": ar.organization})
        elif entity == "user":
            accounts = self._where_list(p, "Account")
            for name in sorted(acc.users):
                u = acc.users[name]
                if (p.names and name not in p.names) or (private and name != who.user):
                    continue
                if accounts and not any(assoc_key(a, name) in acc.assocs for a in accounts):
                    continue
                rows.append({"User": u.name, "Def Acct": u.default_account, "Admin": u.admin_level})
        elif entity == "assoc":
            chosen = {a.key for a in self._assocs(acc, p)}
            for a in _tree_order(acc):
                if a.key not in chosen or (private and a.user and a.user != who.user):
                    continue
                rows.append(_assoc_row(acc, a))
        else:
            for name in sorted(acc.qos):
                if p.names and name not in p.names:
                    continue
                rows.append(_qos_row(acc.qos[name]))
        return [pb.AcctRecord(fields=r) for r in rows]


@dataclass
class _Change:
    acc: Accounting
    op: Op = field(default_factory=Op)

    def put(self, kind: str, name: str) -> None:
        self.op.accounting_delete = [x for x in self.op.accounting_delete if x != (kind, name)]
        self.op.accounting_put = [x for x in self.op.accounting_put if x[:2] != (kind, name)]
        self.op.accounting_put.append((kind, name, ""))  # the document is made at the end

    def delete(self, kind: str, name: str) -> None:
        self.op.accounting_put = [x for x in self.op.accounting_put if x[:2] != (kind, name)]
        self.op.accounting_delete.append((kind, name))


def _modified(acc: Accounting, a: Assoc) -> str:
    """One modified association, as Slurm's database names it."""
    if a.user:
        return f"  C = {acc.cluster:<10} A = {a.account:<20} U = {a.user:<9}"
    parent = f" of {a.parent}" if a.parent else ""
    return f"  C = {acc.cluster:<10} A = {a.account}{parent}"


def _active(job: pb.Job) -> bool:
    return job.state in js.ACTIVE


def _pairs(table: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(table.items()))


def _limit_lines(sets: dict[str, Value]) -> list[str]:
    labels = {
        "Fairshare": "Fairshare    ",
        "GrpJobs": "GrpJobs      ",
        "GrpSubmitJobs": "GrpSubmitJobs",
        "GrpTRES": "GrpTRES      ",
        "MaxJobs": "MaxJobs      ",
        "MaxSubmitJobs": "MaxSubmitJobs",
        "MaxTRESPerJob": "MaxTRES      ",
        "MaxWall": "MaxWall      ",
        "QOS": "QOS          ",
        "DefaultQOS": "DefQOS       ",
    }
    out = []
    for key, label in labels.items():
        if key in sets:
            text = sets[key].text
            out.append(f"  {label} = {text if text not in ('-1', '') else 'NONE'}")
    return out


def _tree_order(acc: Accounting) -> list[Assoc]:
    """Associations as Slurm lists them: each account, its users, then its sub-accounts."""
    kids: dict[str, list[str]] = {}
    for a in acc.assocs.values():
        if not a.user and a.account != ROOT:
            kids.setdefault(a.parent or ROOT, []).append(a.account)
    out: list[Assoc] = []

    def visit(name: str, seen: set[str]) -> None:
        if name in seen or assoc_key(name, "") not in acc.assocs:
            return
        seen.add(name)
        out.append(acc.assocs[assoc_key(name, "")])
        out.extend(
            acc.assocs[k]
            for k in sorted(acc.assocs)
            if acc.assocs[k].account == name and acc.assocs[k].user
        )
        for kid in sorted(kids.get(name, [])):
            visit(kid, seen)

    visit(ROOT, set())
    return out


def _assoc_row(acc: Accounting, a: Assoc) -> dict[str, str]:
    lim: Limits = a.limits
    chain = acc.chain(a.account, a.user) if a.user else acc.chain(a.account, "")
    return {
        "Cluster": acc.cluster,
        "Account": a.account,
        "User": a.user,
        "Partition": "",
        "Share": str(a.fairshare),
        "Priority": "",
        "GrpJobs": _num(lim.grp_jobs),
        "GrpTRES": format_tres(lim.grp_tres),
        "GrpSubmit": _num(lim.grp_submit_jobs),
        "GrpWall": "",
        "GrpTRESMins": "",
        "MaxJobs": _num(lim.max_jobs),
        "MaxTRES": format_tres(lim.max_tres_per_job),
        "MaxTRESPerNode": "",
        "MaxSubmit": _num(lim.max_submit_jobs),
        "MaxWall": _time(lim.max_wall_s),
        "MaxTRESMins": "",
        "QOS": ",".join(sorted(acc.allowed_qos(chain) or acc.qos)),
        "Def QOS": a.default_qos,
        "GrpTRESRunMins": "",
        "ParentName": "" if a.user or a.account == ROOT else a.parent,
    }


def _qos_row(q: QosConfig) -> dict[str, str]:
    return {
        "Name": q.name,
        "Descr": q.description or q.name,
        "Priority": str(q.priority),
        "GraceTime": format_elapsed(q.grace_time_s),
        "Preempt": ",".join(sorted(q.preempt)),
        "PreemptExemptTime": "",
        "PreemptMode": q.preempt_mode or "cluster",
        "Flags": "",
        "UsageThres": "",
        "UsageFactor": f"{q.usage_factor:f}",
        "GrpTRES": format_tres(q.grp_tres),
        "GrpTRESMins": "",
        "GrpTRESRunMins": "",
        "GrpJobs": str(q.grp_jobs) if q.grp_jobs else "",
        "GrpSubmit": "",
        "GrpWall": "",
        "MaxTRES": format_tres(q.max_tres_per_job),
        "MaxTRESPerNode": "",
        "MaxTRESMins": "",
        "MaxWall": _time(q.max_wall_s),
        "MaxTRESPU": format_tres(q.max_tres_per_user),
        "MaxJobsPU": str(q.max_jobs_per_user) if q.max_jobs_per_user else "",
        "MaxSubmitPU": str(q.max_submit_jobs_per_user) if q.max_submit_jobs_per_user else "",
        "MaxTRESPA": "",
        "MaxJobsPA": "",
        "MaxSubmitPA": "",
        "MinTRES": "",
    }
