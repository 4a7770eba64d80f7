"""The simulator: SWF parsing, a hand-checked FCFS vs EASY replay, the metrics."""

from __future__ import annotations

import pathlib

import pytest

from ctld.sim import swf
from ctld.sim.engine import Corrector, replay
from ctld.sim.metrics import bounded_slowdown, summarize

TRACE = """\
; MaxProcs: 4
; a comment
1 0 -1 100 4 -1 -1 4 100 -1 1 7 -1 -1 -1 -1 -1 -1
2 10 -1 100 4 -1 -1 4 100 -1 1 7 -1 -1 -1 -1 -1 -1
3 20 -1 50 1 -1 -1 1 50 -1 1 8 -1 -1 -1 -1 -1 -1
4 30 -1 0 1 -1 -1 1 50 -1 1 8 -1 -1 -1 -1 -1 -1
"""


def test_swf_parse_skips_comments_and_empty_runs() -> None:
    trace = swf.parse(TRACE.splitlines())
    assert trace.max_procs == 4
    assert [j.job_id for j in trace.jobs] == [1, 2, 3]  # job 4 never ran
    assert trace.jobs[2].procs == 1 and trace.jobs[2].estimate == 50 and trace.jobs[2].user == 8


def test_fcfs_waits_where_easy_backfills() -> None:
    # 3 procs busy until t=100 by job 1... here: job 1 holds all 4 procs until 100, job 2
    # (4 procs) waits for it; job 3 (1 proc, 50 s) can only run after job 2 in FCFS
    trace = swf.parse(
        [
            "1 0 -1 100 3 -1 -1 3 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "2 10 -1 100 4 -1 -1 4 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "3 20 -1 50 1 -1 -1 1 50 -1 1 1 -1 -1 -1 -1 -1 -1",
        ]
    )
    fcfs = {o.job.job_id: o.start for o in replay(trace.jobs, 4, "fcfs").outcomes}
    easy = {o.job.job_id: o.start for o in replay(trace.jobs, 4, "easy").outcomes}
    assert fcfs == {1: 0, 2: 100, 3: 200}
    assert easy == {1: 0, 2: 100, 3: 20}  # backfilled: it ends (70) before job 2's start
    result = replay(trace.jobs, 4, "easy")
    forecast = {o.job.job_id: o.first_forecast for o in result.outcomes}
    assert forecast[2] == 100  # the reservation the core made for it held


def test_jobs_are_killed_at_their_estimate_and_metrics() -> None:
    trace = swf.parse(["1 0 -1 500 1 -1 -1 1 60 -1 1 1 -1 -1 -1 -1 -1 -1"])
    (o,) = replay(trace.jobs, 2, "easy").outcomes
    assert o.end - o.start == 60
    assert bounded_slowdown(wait=90, run=5) == pytest.approx(9.5)
    assert bounded_slowdown(wait=0, run=100) == 1.0
    s = summarize(replay(trace.jobs, 2, "easy"), warmup=0)
    assert s.jobs == 1 and s.utilization == pytest.approx(0.5) and s.wait_mean_s == 0


def test_max_procs_wins_over_an_earlier_max_nodes() -> None:
    header = [
        "; MaxNodes: 144",
        "; MaxProcs: 1152",
        "1 0 -1 10 8 -1 -1 8 60 -1 1 1 -1 -1 -1 -1 -1 -1",
    ]
    assert swf.parse(header).max_procs == 1152
    assert swf.parse(["; MaxNodes: 144", *header[2:]]).max_procs == 144


def test_corral_policy_is_ctld_default_config() -> None:
    from corral.config import PriorityConfig, SchedulerConfig
    from ctld.sim.engine import POLICIES

    corral = POLICIES["corral"]
    sc, pc = SchedulerConfig(), PriorityConfig()
    assert corral.settings.predict == sc.predict and corral.settings.placement == sc.placement
    assert corral.settings.backfill_order == sc.backfill_order
    assert corral.settings.starve_after_s == sc.starvation_guard_s
    assert corral.weights is not None and corral.weights.age == pc.weight_age
    assert corral.weights.fairshare == pc.weight_fairshare and corral.fairshare
    assert not POLICIES["corral-limits"].settings.predict
    assert corral.settings.stack_forecasts == sc.stack_forecasts == 0
    assert POLICIES["corral-stacked"].settings.stack_forecasts == 16


def test_predictions_backfill_a_job_limits_would_hold_back() -> None:
    # user 1 ran 10 s twice; job 3 (user 3, no history) holds 2 of 4 procs until its
    # limit, t=140; job 4 needs all 4: reserved at 140. Job 5 (user 1, 2 procs, 200 s
    # limit) would overlap that by its limit; predicted at 10 s it ends well before
    trace = swf.parse(
        [
            "1 0 -1 10 1 -1 -1 1 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "2 20 -1 10 1 -1 -1 1 100 -1 1 1 -1 -1 -1 -1 -1 -1",
            "3 40 -1 100 2 -1 -1 2 100 -1 1 3 -1 -1 -1 -1 -1 -1",
            "4 41 -1 10 4 -1 -1 4 100 -1 1 2 -1 -1 -1 -1 -1 -1",
            "5 42 -1 5 2 -1 -1 2 200 -1 1 1 -1 -1 -1 -1 -1 -1",
        ]
    )
    easy = {o.job.job_id: o.start for o in replay(trace.jobs, 4, "easy").outcomes}
    plus = {o.job.job_id: o.start for o in replay(trace.jobs, 4, "easy++").outcomes}
    assert easy[5] > 42 and easy[4] == 140
    assert plus[5] == 42 and plus[4] == 140  # the prediction held: job 4 not delayed


def test_sim_command_sets_the_starvation_guard(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctld.sim.__main__ import main

    trace = tmp_path / "t.swf"
    trace.write_text(
        "; MaxProcs: 4\n"
        "1 0 -1 10 4 -1 -1 4 100 -1 1 1 -1 -1 -1 -1 -1 -1\n"
        "2 5 -1 10 2 -1 -1 2 100 -1 1 2 -1 -1 -1 -1 -1 -1\n"
    )
    assert main([str(trace), "--policy", "corral", "--starvation-guard", "0"]) == 0
    assert "| corral | 2 |" in capsys.readouterr().out
    assert main([str(trace), "--starvation-guard", "-1"]) == 2
    assert "--starvation-guard must be >= 0" in capsys.readouterr().err


def test_forecast_correction_scales_by_the_median_ratio_of_its_queue_position() -> None:
    c = Corrector(keep=3)
    # nothing learned yet: the forecast as it is
    assert c.correct(1, 0.0, 100.0, 0) == 100.0
    c.started(1, 300.0)  # waited 300 s against a forecast of 100: ratio 3
    for job, waited in ((2, 100.0), (3, 200.0)):
        c.correct(job, 0.0, 100.0, 0)
        c.started(job, waited)
    # ratios 3, 1, 2 at the top place: the median is 2
    assert c.correct(4, 1000.0, 1100.0, 0) == 1200.0
    # another place in the queue (5th: its own bucket) has learned nothing
    assert c.correct(5, 1000.0, 1100.0, 4) == 1100.0
    # only the last ``keep`` ratios count: 1, 2, 5 -> 2; then 2, 5, 5 -> 5
    c.started(4, 1000.0 + 500.0)
    c.correct(6, 0.0, 100.0, 0)
    c.started(6, 500.0)
    assert c.correct(7, 0.0, 100.0, 0) == 500.0


def test_a_line_that_is_not_swf_is_an_error_naming_the_source_and_line() -> None:
    with pytest.raises(swf.SwfError, match=r"^job\.sh:3: not a Standard Workload Format job"):
        swf.parse(["; MaxProcs: 4", "", "#!/bin/sh"], source="job.sh")
    with pytest.raises(swf.SwfError, match=r"^t:1: .*'1 0 x 5"):  # 12+ fields, not numbers
        swf.parse(["1 0 x 5 1 -1 -1 1 60 -1 1 one -1 -1 -1 -1 -1 -1"], source="t")


def test_load_reads_gzip_by_its_magic_and_refuses_a_trace_without_jobs(
    tmp_path: pathlib.Path,
) -> None:
    import gzip

    zipped = tmp_path / "trace.swf"  # gzipped, without .gz in its name
    zipped.write_bytes(gzip.compress(TRACE.encode()))
    assert [j.job_id for j in swf.load(zipped).jobs] == [1, 2, 3]
    empty = tmp_path / "empty.swf"
    empty.write_text("; MaxProcs: 4\n4 30 -1 0 1 -1 -1 1 50 -1 1 8 -1 -1 -1 -1 -1 -1\n")
    with pytest.raises(swf.SwfError, match="no job with a run time"):
        swf.load(empty)
