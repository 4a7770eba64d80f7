"""corral report --ettr: effective training time per user, account and partition.

Each job that ran in the window (QueryAccounting, as sacct reads it) adds its wall
time from its first start, its lost work and restart overhead (corral/ettr.py, the
figures sacct's ETTR field shows); a group's ETTR is its useful time over its wall
time. ``--plot`` draws each group's ETTR as a bar (matplotlib, the ``plot`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass

from client.common import client
from client.ettr_fields import job_ettr, ratio_text
from client.views.job import Job
from corral.errors import CorralError
from corral.slurmfmt import format_elapsed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from corral.wire import json_types as t

PAGE = 5000
Group = tuple[str, str, str]  # user, account, partition


@dataclass
class Sums:
    jobs: int = 0
    interruptions: int = 0
    wall_s: float = 0.0
    lost_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def ratio(self) -> float | None:
        useful = max(0.0, self.wall_s - self.lost_s - self.overhead_s)
        return useful / self.wall_s if self.wall_s > 0 else None


def sums(jobs: Iterable[Job], now: float) -> dict[Group, Sums]:
    out: dict[Group, Sums] = {}
    for job in jobs:
        if not job.first_start_time:
            continue  # never started: no training time to speak of
        figures = job_ettr(job, now)
        key = (job.user, job.account or "-", job.partition)
        s = out.setdefault(key, Sums())
        s.jobs += 1
        s.interruptions += figures.interruptions
        s.wall_s += figures.wall_s
        s.lost_s += figures.lost_s
        s.overhead_s += figures.overhead_s
    return dict(sorted(out.items()))


def format_table(groups: dict[Group, Sums]) -> str:
    head = ("User", "Account", "Partition", "Jobs", "Interrupts", "Wall", "Lost", "Overhead")
    lines = [
        f"{head[0]:<10} {head[1]:<12} {head[2]:<10} {head[3]:>5} {head[4]:>10} "
        f"{head[5]:>12} {head[6]:>12} {head[7]:>12} {'ETTR':>7}"
    ]
    total = Sums()
    for (user, account, partition), s in groups.items():
        lines.append(_row(user, account, partition, s))
        total.jobs += s.jobs
        total.interruptions += s.interruptions
        total.wall_s += s.wall_s
        total.lost_s += s.lost_s
        total.overhead_s += s.overhead_s
    lines.append(_row("total", "", "", total))
    return "\n".join(lines) + "\n"


def _row(user: str, account: str, partition: str, s: Sums) -> str:
    return (
        f"{user:<10} {account:<12} {partition:<10} {s.jobs:>5} {s.interruptions:>10} "
        f"{format_elapsed(round(s.wall_s)):>12} {format_elapsed(round(s.lost_s)):>12} "
        f"{format_elapsed(round(s.overhead_s)):>12} {ratio_text(s.ratio) or '-':>7}"
    )


def fetch(start: float, end: float) -> tuple[list[Job], float]:
    """Every job that ran in [start, end] this caller may see, page by page."""
    api = client()
    request: t.QueryAccountingRequest = {"startAfter": start, "endBefore": end, "limit": PAGE}
    jobs: list[Job] = []
    now = end
    while True:
        reply = api.query_accounting(request)
        page = [Job(j) for j in reply.get("jobs") or ()]
        now = float(reply.get("now") or now)
        jobs.extend(page)
        if len(page) < PAGE:
            return jobs, now
        request["afterJobId"] = str(page[-1].job_id)


def plot(groups: dict[Group, Sums], path: str) -> None:
    from client.report import PLOT_EXTRA

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorralError(
            f"--plot needs matplotlib, the optional extra '{PLOT_EXTRA}': "
            f"pip install 'corral[{PLOT_EXTRA}]'"
        ) from None
    names = ["/".join(g) for g in groups]
    values = [100 * (s.ratio or 0.0) for s in groups.values()]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(names) + 3), 4.5))
    ax.bar(names, values)
    ax.set_ylim(0, 100)
    ax.set_ylabel("ETTR (%)")
    ax.set_title("Effective training time per user/account/partition")
    ax.tick_params(axis="x", labelrotation=45)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise CorralError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def report(start: float, end: float, plot_path: str | None) -> int:
    jobs, now = fetch(start, end)
    groups = sums(jobs, min(now, end))
    if plot_path:
        plot(groups, plot_path)
        print(f"corral report: wrote {plot_path}")
    else:
        print(format_table(groups), end="")
    return 0
