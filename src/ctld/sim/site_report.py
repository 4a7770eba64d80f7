"""What a replay of the site's history says, per partition, account and user, beside
what really happened: waits, bounded slowdown, GPU use against fair-share targets,
preemptions, the longest wait; and how faithful the replay under the running
configuration is (its starts against the real ones)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from corral.slurmfmt import format_duration
from ctld.sched.fairshare import AccountShare, share_rows
from ctld.sim.history import History
from ctld.sim.metrics import bounded_slowdown
from ctld.sim.site import Site
from ctld.sim.site_engine import Outcome
from ctld.sim.site_jobs import ReplayJob, eligible_at

GROUPS = ("partition", "account", "user")


@dataclass(frozen=True)
class JobRow:
    """One job of the window in one run (the real history, or a replay)."""

    job_id: int
    partition: str
    account: str
    user: str
    eligible: float
    start: float  # 0: it never started
    end: float
    gpus: float
    runs: tuple[tuple[float, float], ...]  # (start, end) of each run
    preempted: int

    @property
    def wait(self) -> float:
        return max(self.start - self.eligible, 0.0)


@dataclass
class Stats:
    jobs: int = 0
    never_started: int = 0  # still waiting at the end (not cancelled while waiting)
    mean_wait: float = 0.0
    p95_wait: float = 0.0
    max_wait: float = 0.0
    bsld: float = 0.0
    gpu_hours: float = 0.0
    gpu_util: float | None = None  # partitions only: of their GPUs over the window
    target_gpu_hours: float | None = None  # accounts and users: their fair share of all
    preempted: int = 0


@dataclass
class Run:
    """One column of the report: ``real``, ``running`` or ``candidate``."""

    name: str
    rows: list[JobRow]
    site: Site
    groups: dict[str, dict[str, Stats]] = field(default_factory=dict)
    total: Stats = field(default_factory=Stats)


def real_rows(jobs: Iterable[ReplayJob]) -> list[JobRow]:
    out = []
    for rj in jobs:
        real, job = rj.real, rj.job
        if not rj.counted or real is None:
            continue
        out.append(
            JobRow(
                job.job_id,
                real.partition or job.partition,
                job.account,
                job.user,
                real.eligible,
                real.start,
                real.end,
                real.gpus,
                real.runs,
                real.preempted,
            )
        )
    return out


def replay_rows(jobs: Iterable[ReplayJob], outcomes: dict[int, Outcome]) -> list[JobRow]:
    listed = list(jobs)
    times: dict[int, list[tuple[float, float]]] = {}
    for rj in listed:
        o = outcomes[rj.job.job_id]
        times[rj.job.job_id] = [(o.start, o.end)]
        if rj.job.array_job_id and rj.job.array_job_id != rj.job.job_id:
            times.setdefault(rj.job.array_job_id, []).append((o.start, o.end))
    out = []
    for rj in listed:
        if not rj.counted:
            continue
        o = outcomes[rj.job.job_id]
        eligible = eligible_at(rj, o.start, lambda i: times.get(i, []))
        out.append(
            JobRow(
                rj.job.job_id,
                o.partition or rj.job.partition,
                rj.job.account,
                rj.job.user,
                eligible,
                o.start,
                o.end,
                o.gpus,
                tuple(o.runs),
                o.preempted,
            )
        )
    return out


def shares(site: Site, rows: Iterable[JobRow]) -> dict[tuple[str, str], float]:
    """Each association's normalized share (account, "" for the account's own)."""
    tree = site.accounting.share_tree()
    names = {a.name for a in tree}
    known = {(a.name, u) for a in tree for u, _s in a.users}
    extra: dict[str, list[tuple[str, int]]] = {}
    for r in rows:  # users with no association: one share under their account or root
        acct = r.account if r.account in names else "root"
        if (acct, r.user) not in known:
            known.add((acct, r.user))
            extra.setdefault(acct, []).append((r.user, 1))
    tree = [
        AccountShare(a.name, a.parent, a.shares, (*a.users, *extra.get(a.name, ()))) for a in tree
    ]
    if "root" not in names:
        tree.append(AccountShare("root", "", 1, tuple(extra.get("root", ()))))
    return {(row.account, row.user): row.norm_shares for row in share_rows(tree, {})}


def summarize(run: Run, history: History, gpus_of: Callable[[str], int]) -> None:
    """Fill ``run``'s groups and total."""
    lo, hi = history.start, history.end
    share = shares(run.site, run.rows)
    total_gpu_h = sum(_gpu_hours(r, lo, hi) for r in run.rows)
    run.total = _stats(run.rows, lo, hi)
    for group in GROUPS:
        by: dict[str, list[JobRow]] = {}
        for r in run.rows:
            by.setdefault(getattr(r, group), []).append(r)
        stats = {}
        for name, rows in sorted(by.items()):
            s = _stats(rows, lo, hi)
            if group == "partition":
                gpus = gpus_of(name)
                s.gpu_util = s.gpu_hours / (gpus * (hi - lo) / 3600) if gpus and hi > lo else None
            elif group == "account":
                s.target_gpu_hours = share.get((name, ""), 0.0) * total_gpu_h
            else:
                fraction = sum(v for (a, u), v in share.items() if u == name)
                s.target_gpu_hours = fraction * total_gpu_h
            stats[name] = s
        run.groups[group] = stats


def _gpu_hours(r: JobRow, lo: float, hi: float) -> float:
    return sum(r.gpus * max(0.0, min(e or hi, hi) - max(s, lo)) for s, e in r.runs) / 3600


def _stats(rows: Sequence[JobRow], lo: float, hi: float) -> Stats:
    started = [r for r in rows if r.start > 0]
    waiting = [r for r in rows if not r.start and not r.end]  # not cancelled: still waiting
    waits = sorted(r.wait for r in started)
    bslds = [bounded_slowdown(r.wait, max(r.end - r.start, 0.0)) for r in started if r.end > 0]
    return Stats(
        jobs=len(rows),
        never_started=len(waiting),
        mean_wait=statistics.fmean(waits) if waits else 0.0,
        p95_wait=waits[min(len(waits) - 1, int(len(waits) * 0.95))] if waits else 0.0,
        max_wait=waits[-1] if waits else 0.0,
        bsld=statistics.fmean(bslds) if bslds else 0.0,
        gpu_hours=sum(_gpu_hours(r, lo, hi) for r in rows),
        preempted=sum(r.preempted for r in rows),
    )


@dataclass(frozen=True)
class Fidelity:
    compared: int
    within: int
    tolerance_s: float
    tolerance_pct: float
    median_s: float
    p90_s: float
    max_s: float

    def line(self) -> str:
        if not self.compared:
            return "fidelity: no job started both in reality and in the replay: nothing to compare"
        share = self.within / self.compared
        return (
            f"fidelity: {self.within} of {self.compared} jobs ({share:.0%}) started in the "
            f"replay under the running configuration within max({self.tolerance_s:g} s, "
            f"{self.tolerance_pct:g}% of their real wait) of their real start; start error "
            f"median {self.median_s:.1f} s, p90 {self.p90_s:.1f} s, max {self.max_s:.1f} s"
        )


def fidelity(
    real: Iterable[JobRow], replay: Iterable[JobRow], tolerance_s: float, tolerance_pct: float
) -> Fidelity:
    """The replay's starts against the real ones, over jobs that started in both."""
    mine = {r.job_id: r for r in replay}
    errors, within = [], 0
    for r in real:
        other = mine.get(r.job_id)
        if not r.start or other is None or not other.start:
            continue
        err = abs(other.start - r.start)
        errors.append(err)
        if err <= max(tolerance_s, tolerance_pct / 100 * r.wait):
            within += 1
    errors.sort()
    pick = (lambda q: errors[min(len(errors) - 1, int(len(errors) * q))]) if errors else None
    return Fidelity(
        len(errors),
        within,
        tolerance_s,
        tolerance_pct,
        pick(0.5) if pick else 0.0,
        pick(0.9) if pick else 0.0,
        errors[-1] if errors else 0.0,
    )


# ------------------------------------------------------------ text


def _d(seconds: float) -> str:
    return format_duration(round(seconds))


def _safe(name: str) -> str:
    """A name from the store as one printable cell (no control characters)."""
    return "".join(c if c.isprintable() else "?" for c in name) or "-"


def _util(s: Stats) -> str:
    return f"{s.gpu_util:.1%}" if s.gpu_util is not None else "-"


def _target(s: Stats) -> str:
    return _hours(s.target_gpu_hours) if s.target_gpu_hours is not None else "-"


def _hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3f}"


HEADER: dict[str, tuple[str, Callable[[Stats], str]]] = {
    "partition": ("GPU util", _util),
    "account": ("GPU-h target", _target),
    "user": ("GPU-h target", _target),
}


def table(group: str, runs: Sequence[Run]) -> str:
    extra, cell = HEADER[group]
    head = [
        "",
        "run",
        "jobs",
        "mean wait",
        "p95 wait",
        "longest wait",
        "mean bsld",
        "GPU-h",
        extra,
        "preempted",
        "never started",
    ]
    lines = [head]
    names = sorted({n for run in runs for n in run.groups.get(group, {})})
    for name in names:
        for run in runs:
            s = run.groups[group].get(name)
            if s is None:
                continue
            lines.append(
                [
                    _safe(name),
                    run.name,
                    str(s.jobs),
                    _d(s.mean_wait),
                    _d(s.p95_wait),
                    _d(s.max_wait),
                    f"{s.bsld:.2f}",
                    _hours(s.gpu_hours),
                    cell(s),
                    str(s.preempted),
                    str(s.never_started),
                ]
            )
    lines[0][0] = group
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = []
    for row in lines:
        out.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(out)
