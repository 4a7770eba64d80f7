"""sacctmgr's requests: add, modify, delete and list accounts, users, associations, QOS.

The command sends its words after the entity as they were typed (names, ``key=value``,
``where``, ``set``); sacctmgr_words.py parses them with Slurm's rules. This module
checks who may do it, applies a change to a copy of the accounting database, commits
the copy's changed records through the one commit step and only then installs it. The
reply carries what sacctmgr prints (Slurm's wording) and, for list/show, each record's
columns (sacctmgr_list.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.config import QosConfig
from corral.errors import InvalidRequest
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.accounts.sacctmgr_list import records
from ctld.accounts.sacctmgr_words import (
    ENTITIES,
    Parsed,
    Value,
    admin_level,
    apply_assoc,
    apply_qos,
    format_tres,
    parse_args,
    parse_tres,
    select_accounts,
    select_assocs,
    select_users,
    where_list,
)
from ctld.core.commit import Change
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model.accounting import ROOT, Account, Accounting, Assoc, User, assoc_key
from ctld.model.authz import Policy
from ctld.storage.store_rows import Op

# parse_tres and format_tres are sacctmgr's TRES syntax, read by the tests from here
__all__ = ["SacctmgrOps", "format_tres", "parse_tres"]


# ---------------------------------------------------------------- the operations


class SacctmgrOps:
    def __init__(self, state: State, policy: Policy) -> None:
        self.state = state
        self.policy = policy
        # one change at a time: each works on a copy of the database as it is installed
        # (a reconfigure, which seeds it again from the config, takes it too)
        self.lock = asyncio.Lock()

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
        async with self.lock:
            return await self._change(action, entity, parsed)

    async def _change(self, action: str, entity: str, parsed: Parsed) -> pb.SacctmgrResponse:
        self.state.store.check_writable()
        acc = self.state.acct.accounting.clone()
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
            apply_assoc(acc, own, p.sets)
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
        level = admin_level(p.sets["AdminLevel"].text) if "AdminLevel" in p.sets else ""
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
                apply_assoc(acc, mine, p.sets)
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
            acc.qos[name] = apply_qos(acc, QosConfig(name), p.sets)
            ch.put("qos", name)
        desc = p.sets.get("Description")
        lines = [" Adding QOS(s)", *(f"  {n}" for n in new), " Settings"]
        lines.append(f"  Description    = {desc.text if desc else 'QOS Name'}")
        return "\n".join(lines)

    # ------------------------------------------------------------ modify

    def _modify_account(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = select_accounts(acc, p)
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
                apply_assoc(acc, a, rest)
                ch.put("assoc", a.key)
                lines.append(_modified(acc, a))
        return "\n".join(lines) if lines else " Nothing modified"

    def _modify_user(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = select_users(acc, p)
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
                    u.admin_level = admin_level(own["AdminLevel"].text)
                ch.put("user", name)
                lines.append(f"  {name}")
        rest = {k: v for k, v in p.sets.items() if k not in own}
        if rest:
            accounts = where_list(p, "Account")
            found = [
                a
                for key, a in sorted(acc.assocs.items())
                if a.user in names and (not accounts or a.account in accounts)
            ]
            if not found:
                raise InvalidRequest(" No associations match these users")
            lines.append(" Modified user associations...")
            for a in found:
                apply_assoc(acc, a, rest)
                ch.put("assoc", a.key)
                lines.append(_modified(acc, a))
        return "\n".join(lines) if lines else " Nothing modified"

    def _modify_assoc(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        if not p.sets:
            raise InvalidRequest(" You didn't give me anything to set")
        found = select_assocs(acc, p)
        if not found:
            return " Nothing modified"
        lines = [" Modified account associations..."]
        for a in found:
            apply_assoc(acc, a, p.sets)
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
            acc.qos[n] = apply_qos(acc, acc.qos[n], p.sets)
            ch.put("qos", n)
            lines.append(f"  {n}")
        return "\n".join(lines)

    # ------------------------------------------------------------ delete

    def _delete_account(self, ch: _Change, p: Parsed) -> str:
        acc = ch.acc
        names = select_accounts(acc, p)
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
        names = select_users(acc, p)
        accounts = where_list(p, "Account")
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
        found = [a for a in select_assocs(acc, p) if a.user]
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

    def _refuse_active(self, *, account_names: list[str]) -> None:
        if any(_active(j) and j.account in account_names for j in self.state.jobs.values()):
            raise InvalidRequest(" Error with request: Job(s) active, cancel job(s) before remove")

    # ------------------------------------------------------------ applying settings

    def records(self, who: Identity, entity: str, p: Parsed) -> list[pb.AcctRecord]:
        return records(self.state.acct.accounting, self.policy, who, entity, p)


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
