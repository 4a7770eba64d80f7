"""sacct's fields for a job's interruptions and its effective training time ratio
(corral/ettr.py; docs/reliability.md): corral's own, after Slurm's and ``Restarts``."""

from __future__ import annotations

from client.common import real, text
from corral.ettr import Ettr, Interrupted, ettr
from corral.slurmfmt import format_elapsed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from client.common import Json

# name, width, kind (fmt.py's): Interruptions (how many), InterruptCauses (each cause
# with its count), RestartOverhead and LostTime (their sums), ETTR (useful / wall)
ETTR_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("Interruptions", 13, "n"),
    ("InterruptCauses", 20, "s"),
    ("RestartOverhead", 15, "t"),
    ("LostTime", 10, "t"),
    ("ETTR", 7, "s"),
)


def interruptions(job: Json) -> list[Json]:
    items = job.get("interruptions") or []
    return [i for i in items if isinstance(i, dict)]


def job_ettr(job: Json, now: float) -> Ettr:
    """The job's figures, from its JSON (sacct's, squeue's, corral report's)."""
    items = [
        Interrupted(real(i, "time"), real(i, "lostS"), real(i, "nextStart"))
        for i in interruptions(job)
    ]
    return ettr(real(job, "firstStartTime"), real(job, "endTime"), items, now)


def causes(job: Json) -> str:
    """``node_fail:2,drain:1`` in the order they first came."""
    counts: dict[str, int] = {}
    for i in interruptions(job):
        cause = text(i, "cause") or "unknown"
        counts[cause] = counts.get(cause, 0) + 1
    return ",".join(f"{c}:{n}" for c, n in counts.items())


def ratio_text(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def ettr_values(job: Json, now: float) -> dict[str, str]:
    figures = job_ettr(job, now)
    return {
        "Interruptions": str(figures.interruptions),
        "InterruptCauses": causes(job),
        "RestartOverhead": format_elapsed(round(figures.overhead_s)),
        "LostTime": format_elapsed(round(figures.lost_s)),
        "ETTR": ratio_text(figures.ratio),
    }
