"""sreport's account tree: the usage ctld added up per (account, user), summed up the
tree of accounts (AccountUtilizationByUser) or per user (UserUtilizationByAccount,
TopUsage), read from the typed views of the ReportUsage reply."""

from __future__ import annotations

from client.views.accounting import AccountParent, UsageRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from corral.wire import json_types as t

Usage = dict[str, float]


def add(into: Usage, more: Mapping[str, float]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0.0) + float(value)


def associations(reply: t.ReportUsageResponse) -> dict[tuple[str, str], Usage]:
    """(account, user) -> TRES-seconds over the whole window."""
    out: dict[tuple[str, str], Usage] = {}
    for rec in map(UsageRecord, reply.get("records", [])):
        add(out.setdefault((rec.account or "root", rec.user), {}), rec.tres_s)
    return out


def account_rows(
    reply: t.ReportUsageResponse, accounts: Iterable[str] = ()
) -> list[tuple[str, str, Usage]]:
    """AccountUtilizationByUser's rows: each account (its users and sub-accounts added
    up), then its users, then its sub-accounts, alphabetically, from root (or from the
    accounts asked for)."""
    parents = {a.account: a.parent for a in map(AccountParent, reply.get("accounts", []))}
    assocs = associations(reply)
    users: dict[str, list[str]] = {}
    for account, user in assocs:
        users.setdefault(account, []).append(user)
        parents.setdefault(account, "root" if account != "root" else "")
    children: dict[str, list[str]] = {}
    for account, parent in parents.items():
        if account != "root" and parent:
            children.setdefault(parent, []).append(account)

    totals: dict[str, Usage] = {}

    def total(account: str, seen: frozenset[str]) -> Usage:
        if account in totals:
            return totals[account]
        out: Usage = {}
        for user in users.get(account, []):
            add(out, assocs[(account, user)])
        for child in children.get(account, []):
            if child not in seen:
                add(out, total(child, seen | {child}))
        totals[account] = out
        return out

    rows: list[tuple[str, str, Usage]] = []

    def walk(account: str, seen: frozenset[str]) -> None:
        used = total(account, seen)
        if account != "root" and not any(used.values()):
            return  # an account nobody charged in the window
        rows.append((account, "", used))
        rows.extend((account, u, assocs[(account, u)]) for u in sorted(users.get(account, [])))
        for child in sorted(children.get(account, [])):
            if child not in seen:
                walk(child, seen | {child})

    for start in sorted(set(accounts)) or ["root"]:
        walk(start, frozenset({start}))
    return rows


def user_rows(
    reply: t.ReportUsageResponse, first_tres: str, group: bool
) -> list[tuple[str, str, Usage]]:
    """(accounts, user, usage) per user and account (or per user, ``group``), the
    largest user of the first TRES first."""
    merged: dict[tuple[str, str], Usage] = {}
    accts: dict[str, list[str]] = {}
    for (account, user), used in associations(reply).items():
        key = ("", user) if group else (account, user)
        add(merged.setdefault(key, {}), used)
        accts.setdefault(user, []).append(account)
    rows = [
        (", ".join(sorted(accts[u])) if group else a, u, used) for (a, u), used in merged.items()
    ]
    rows.sort(key=lambda r: (-r[2].get(first_tres, 0.0), r[1], r[0]))
    return rows
