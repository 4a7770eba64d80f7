"""Classic fair-share over a tree of accounts and users (Slurm's pre-Fair-Tree formula).

For every association (an account, or a user within an account):

    S_norm = S_raw / (S_raw of it and its siblings) * S_norm(parent)      (root: 1)
    U_norm = its decayed usage / the whole cluster's decayed usage
    U_eff  = U_norm + (U_eff(parent) - U_norm) * S_raw / (S_raw of it and siblings)
             (the root's children: U_eff = U_norm, since the root holds all usage)
    F      = 2 ** (-U_eff / S_norm)                                       (S_norm 0: 0)

so a user who used nothing has F = 1, one who used exactly their share F = 0.5, and
part of an account's over- or under-use is passed on to its members. ctld keeps the
usage (TRES-weighted seconds, decayed with a half-life); this module only computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AccountShare:
    name: str
    parent: str  # "" for the root
    shares: int
    users: tuple[tuple[str, int], ...] = ()  # (user, shares)


@dataclass(frozen=True)
class ShareRow:
    """One line of ``sshare``."""

    account: str
    user: str  # "" for an account's own line
    depth: int
    raw_shares: int
    norm_shares: float
    raw_usage: float
    norm_usage: float
    effective_usage: float
    fairshare: float


ROOT = "root"


def share_rows(
    accounts: Sequence[AccountShare], usage: Mapping[tuple[str, str], float]
) -> list[ShareRow]:
    """Rows for the whole tree, depth first, accounts before their users.

    ``usage`` is keyed by (account, user); usage under an account that is not in the
    tree counts for the root, so nothing is silently dropped.
    """
    children: dict[str, list[AccountShare]] = {}
    by_name = {a.name: a for a in accounts}
    for a in accounts:
        if a.name != ROOT:
            children.setdefault(a.parent or ROOT, []).append(a)
    for kids in children.values():
        kids.sort(key=lambda a: a.name)

    account_usage: dict[str, float] = {}

    def subtree_usage(name: str) -> float:
        acct = by_name.get(name)
        own = sum(v for (a, _u), v in usage.items() if a == name)
        if name == ROOT:
            own += sum(v for (a, _u), v in usage.items() if a not in by_name)
        total = own + sum(subtree_usage(k.name) for k in children.get(name, []))
        account_usage[name] = total
        del acct
        return total

    total_usage = subtree_usage(ROOT)
    rows: list[ShareRow] = []

    def norm(value: float) -> float:
        return value / total_usage if total_usage > 0 else 0.0

    def visit(acct: AccountShare, depth: int, s_norm: float, u_eff_parent: float, sib: int) -> None:
        u_norm = norm(account_usage.get(acct.name, 0.0))
        if acct.name == ROOT or acct.parent in ("", ROOT):
            u_eff = u_norm
        else:
            u_eff = u_norm + (u_eff_parent - u_norm) * (acct.shares / sib if sib else 0.0)
        rows.append(
            ShareRow(
                acct.name,
                "",
                depth,
                acct.shares,
                s_norm,
                account_usage.get(acct.name, 0.0),
                u_norm,
                u_eff,
                _factor(u_eff, s_norm),
            )
        )
        kids = children.get(acct.name, [])
        siblings = sum(k.shares for k in kids) + sum(s for _u, s in acct.users)
        for user, shares in sorted(acct.users):
            raw = usage.get((acct.name, user), 0.0)
            un = norm(raw)
            if acct.name == ROOT:
                ue = un
            else:
                ue = un + (u_eff - un) * (shares / siblings if siblings else 0.0)
            sn = s_norm * shares / siblings if siblings else 0.0
            rows.append(
                ShareRow(acct.name, user, depth + 1, shares, sn, raw, un, ue, _factor(ue, sn))
            )
        for kid in kids:
            sn = s_norm * kid.shares / siblings if siblings else 0.0
            visit(kid, depth + 1, sn, u_eff, siblings)

    root = by_name.get(ROOT, AccountShare(ROOT, "", 1))
    visit(root, 0, 1.0, 0.0, 0)
    return rows


def factor_of(rows: Sequence[ShareRow], account: str, user: str) -> float:
    """The fair-share factor of ``user`` in ``account`` (the account's own if the user
    has no association there, the root's if neither is known)."""
    fallback = 1.0
    for row in rows:
        if row.account == account and row.user == user:
            return row.fairshare
        if row.account == account and not row.user:
            fallback = row.fairshare
    return fallback


def _factor(u_eff: float, s_norm: float) -> float:
    if s_norm <= 0:
        return 0.0
    return float(2.0 ** (-u_eff / s_norm))
