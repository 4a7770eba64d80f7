"""sacct's fields for a job's interruptions and its effective training time ratio
(corral/ettr.py; docs/reliability.md): corral's own, after Slurm's and ``Restarts``."""

from __future__ import annotations

from corral.ettr import Ettr, Interrupted, ettr
from corral.slurmfmt import format_elapsed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from client.views.job import Job


def job_ettr(job: Job, now: float) -> Ettr:
    """The job's figures (sacct's, corral report's)."""
    items = [Interrupted(i.time, i.lost_s, i.next_start) for i in job.interruptions]
    return ettr(job.first_start_time, job.end_time, items, now)


def causes(job: Job) -> str:
    """``node_fail:2,drain:1`` in the order they first came."""
    counts: dict[str, int] = {}
    for i in job.interruptions:
        cause = i.cause or "unknown"
        counts[cause] = counts.get(cause, 0) + 1
    return ",".join(f"{c}:{n}" for c, n in counts.items())


def ratio_text(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def ettr_values(job: Job, now: float) -> dict[str, str]:
    figures = job_ettr(job, now)
    return {
        "Interruptions": str(figures.interruptions),
        "InterruptCauses": causes(job),
        "RestartOverhead": format_elapsed(round(figures.overhead_s)),
        "LostTime": format_elapsed(round(figures.lost_s)),
        "ETTR": ratio_text(figures.ratio),
    }
