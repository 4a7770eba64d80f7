"""The figures the published backfill results use (see ../shared/traces/PUBLISHED.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ctld.sim.engine import Result

BSLD_THRESHOLD_S = 10.0


@dataclass(frozen=True)
class Summary:
    jobs: int
    utilization: float
    wait_mean_s: float
    wait_p95_s: float
    bsld_mean: float
    pass_mean_ms: float
    pass_max_ms: float
    forecast_mae_s: float  # |first expected start - actual start|, jobs that waited
    corrected_mae_s: float  # the same for the history-corrected forecast (engine.Corrector)
    wait_max_s: float = 0.0
    forecast_median_s: float = 0.0  # median |first expected start - actual start|
    forecast_p90_s: float = 0.0
    top_jobs: int = 0  # jobs that held the top reservation at some pass
    top_backfilled: int = 0  # ... with jobs backfilled in front on predictions
    top_delayed: int = 0  # ... one of which still ran at the reserved start, delaying it
    top_delay_mean_s: float = 0.0  # over the delayed ones: start - reserved start
    top_delay_max_s: float = 0.0
    corrected_median_s: float = 0.0  # the history-corrected forecast's median error
    corrected_p90_s: float = 0.0


def bounded_slowdown(wait: float, run: float) -> float:
    return max(1.0, (wait + run) / max(BSLD_THRESHOLD_S, run))


def summarize(result: Result, warmup: float = 0.01) -> Summary:
    """Averages leave out the first ``warmup`` fraction of finished jobs (as Tsafrir)."""
    done = sorted(result.outcomes, key=lambda o: o.end)
    counted = done[int(len(done) * warmup) :]
    in_order = [o.start - o.job.submit for o in counted]
    waits = sorted(in_order)
    runs = [o.end - o.start for o in counted]
    bslds = [bounded_slowdown(w, r) for w, r in zip(in_order, runs, strict=True)]
    span = max(o.end for o in done) - min(o.job.submit for o in done) if done else 0.0
    used = sum((o.end - o.start) * o.job.procs for o in done)
    waited = [o for o in counted if o.start - o.job.submit > 0 and o.first_forecast]
    mae = statistics.fmean(abs(o.first_forecast - o.start) for o in waited) if waited else 0.0
    corrected = (
        statistics.fmean(abs(o.corrected_forecast - o.start) for o in waited) if waited else 0.0
    )
    errors = sorted(abs(o.first_forecast - o.start) for o in waited)
    corrected_errors = sorted(abs(o.corrected_forecast - o.start) for o in waited)
    delays = [d.delay for d in result.top_delays if d.delay > 0]
    times = result.pass_times or [0.0]
    return Summary(
        jobs=len(done),
        utilization=used / (span * result.procs) if span else 0.0,
        wait_mean_s=statistics.fmean(waits) if waits else 0.0,
        wait_p95_s=waits[int(len(waits) * 0.95)] if waits else 0.0,
        bsld_mean=statistics.fmean(bslds) if bslds else 0.0,
        pass_mean_ms=1000 * statistics.fmean(times),
        pass_max_ms=1000 * max(times),
        forecast_mae_s=mae,
        corrected_mae_s=corrected,
        wait_max_s=waits[-1] if waits else 0.0,
        forecast_median_s=_pct(errors, 0.5),
        forecast_p90_s=_pct(errors, 0.9),
        top_jobs=result.top_jobs,
        top_backfilled=len(result.top_delays),
        top_delayed=len(delays),
        top_delay_mean_s=statistics.fmean(delays) if delays else 0.0,
        top_delay_max_s=max(delays, default=0.0),
        corrected_median_s=_pct(corrected_errors, 0.5),
        corrected_p90_s=_pct(corrected_errors, 0.9),
    )


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0
