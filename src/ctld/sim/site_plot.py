"""``corral sim --from-store --plot OUT.png``: the report as figures (matplotlib, the
optional extra ``plot``): waits per account, GPU-hours against fair-share targets per
account, GPU utilization per partition, and the distribution of waits, one panel each,
the real history beside each replay."""

from __future__ import annotations

from collections.abc import Sequence

from corral.errors import CorralError
from ctld.sim.site_report import Run

PLOT_EXTRA = "plot"


def plot(runs: Sequence[Run], path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorralError(
            f"--plot needs matplotlib, the optional extra '{PLOT_EXTRA}': "
            f"pip install 'corral[{PLOT_EXTRA}]'"
        ) from None
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    accounts = sorted({a for r in runs for a in r.groups.get("account", {})})
    partitions = sorted({p for r in runs for p in r.groups.get("partition", {})})
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        at = [x + (i - (len(runs) - 1) / 2) * width for x in range(len(accounts))]
        stats = [run.groups["account"].get(a) for a in accounts]
        axes[0][0].bar(at, [s.mean_wait / 60 if s else 0 for s in stats], width, label=run.name)
        axes[0][0].scatter(
            at, [s.p95_wait / 60 if s else 0 for s in stats], marker="_", s=200, color="black"
        )
        axes[0][1].bar(at, [s.gpu_hours if s else 0 for s in stats], width, label=run.name)
        if run.name != "real":
            axes[0][1].scatter(
                at,
                [(s.target_gpu_hours or 0) if s else 0 for s in stats],
                marker="_",
                s=200,
                color="red",
            )
        at = [x + (i - (len(runs) - 1) / 2) * width for x in range(len(partitions))]
        util = [run.groups["partition"].get(p) for p in partitions]
        axes[1][0].bar(
            at, [100 * (s.gpu_util or 0) if s else 0 for s in util], width, label=run.name
        )
        waits = sorted(r.wait / 60 for r in run.rows if r.start > 0)
        if waits:
            axes[1][1].step(
                waits,
                [(k + 1) / len(waits) for k in range(len(waits))],
                where="post",
                label=run.name,
            )
    axes[0][0].set(
        title="wait per account (bar: mean, tick: p95)",
        ylabel="minutes",
        xticks=range(len(accounts)),
        xticklabels=accounts,
    )
    axes[0][1].set(
        title="GPU-hours per account (red tick: fair-share target)",
        ylabel="GPU-hours",
        xticks=range(len(accounts)),
        xticklabels=accounts,
    )
    axes[1][0].set(
        title="GPU utilization per partition",
        ylabel="%",
        xticks=range(len(partitions)),
        xticklabels=partitions,
    )
    axes[1][1].set(
        title="waits, all jobs", xlabel="minutes", ylabel="share of jobs", xscale="symlog"
    )
    for ax in axes.flat:
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise CorralError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
