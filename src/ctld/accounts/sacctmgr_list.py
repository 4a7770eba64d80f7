"""sacctmgr's list and show: each record's columns by Slurm's header names (the command
picks and lays them out), associations in Slurm's tree order, private data hidden."""

from __future__ import annotations

from corral.config import QosConfig
from corral.identity import Identity
from corral.slurmfmt import format_elapsed
from corral.wire import corral_pb2 as pb
from ctld.accounts.sacctmgr_words import Parsed, format_tres, select_assocs, where_list
from ctld.model.accounting import ROOT, Accounting, Assoc, Limits, assoc_key
from ctld.model.authz import Policy


def records(
    acc: Accounting, policy: Policy, who: Identity, entity: str, p: Parsed
) -> list[pb.AcctRecord]:
    private = "accounting" in policy.private_data and not policy.is_operator(who)
    rows: list[dict[str, str]] = []
    if entity == "account":
        for name in sorted(acc.accounts):
            if p.names and name not in p.names:
                continue
            ar = acc.accounts[name]
            rows.append({"Account": ar.name, "Descr": ar.description, "Org": ar.organization})
    elif entity == "user":
        accounts = where_list(p, "Account")
        for name in sorted(acc.users):
            u = acc.users[name]
            if (p.names and name not in p.names) or (private and name != who.user):
                continue
            if accounts and not any(assoc_key(a, name) in acc.assocs for a in accounts):
                continue
            rows.append({"User": u.name, "Def Acct": u.default_account, "Admin": u.admin_level})
    elif entity == "assoc":
        chosen = {a.key for a in select_assocs(acc, p)}
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


def _time(seconds: int) -> str:
    return "" if seconds < 0 else format_elapsed(seconds)


def _num(value: int) -> str:
    return "" if value < 0 else str(value)
