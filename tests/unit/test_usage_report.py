"""sreport's sums (ctld/api/usage_report.py) from runs the store returns, on both stores:
each run of a requeued job counts its own time, a running job counts up to now, each
run is clipped to each bucket, runs outside the window are not read."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import InvalidRequest
from corral.wire import corral_pb2 as pb
from ctld.api.usage_report import check_bounds, usage_records
from ctld.storage.store import Store, insert_job, update_job

T0 = 1_000_000.0
H = 3600.0


def job(job_id: int, state: int, start: float, end: float, **kw: Any) -> pb.Job:
    j = pb.Job(
        job_id=job_id,
        user=kw.pop("user", "alice"),
        account=kw.pop("account", "physics"),
        state=state,
        submit_time=start - 10,
        start_time=start,
        end_time=end,
        num_cpus=kw.pop("cpus", 4),
        num_gpus=kw.pop("gpus", 2),
        num_nodes=1,
        mem_mb=1024,
        **kw,
    )
    j.events.add(event="submitted", to_state=pb.JOB_STATE_PENDING)
    return j


async def fill(store: Store) -> None:
    done = job(1, pb.JOB_STATE_COMPLETED, T0, T0 + 2 * H)  # 00:00-02:00
    running = job(2, pb.JOB_STATE_RUNNING, T0 + 3 * H, 0, user="bob", gpus=1)  # 03:00-now
    before = job(3, pb.JOB_STATE_COMPLETED, T0 - 5 * H, T0 - 4 * H)  # outside the window
    pending = job(4, pb.JOB_STATE_PENDING, 0, 0)
    # requeued: ran 01:00-01:30 (run 0), runs again from 02:00 to 02:30 (run 1)
    first = job(5, pb.JOB_STATE_REQUEUED, T0 + H, T0 + 1.5 * H, account="bio", gpus=0)
    again = job(5, pb.JOB_STATE_COMPLETED, T0 + 2 * H, T0 + 2.5 * H, account="bio", gpus=0)
    again.restart_count = 1
    await store.commit(*(insert_job(j) for j in (done, running, before, pending, first)))
    await store.commit(update_job(again, [], [first]))


def as_dict(records: list[pb.UsageRecord]) -> dict[tuple[str, str, int], dict[str, float]]:
    return {(r.account, r.user, r.bucket): dict(r.tres_s) for r in records}


async def test_runs_clipped_to_buckets(store_url: str) -> None:
    store = Store(store_url)
    store.open()
    try:
        await fill(store)
        bounds = [T0, T0 + 2 * H, T0 + 4 * H]  # two 2-hour buckets
        runs = store.runs_between(bounds[0], bounds[-1])
        assert sorted((j.job_id, j.restart_count) for j in runs) == [(1, 0), (2, 0), (5, 0), (5, 1)]
        got = as_dict(usage_records(runs, bounds, now=T0 + 3.5 * H))
    finally:
        store.close()
    assert got == {
        ("physics", "alice", 0): {
            "cpu": 4 * 2 * H,
            "gres/gpu": 2 * 2 * H,
            "mem": 1024 * 2 * H,
            "node": 2 * H,
            "billing": 4 * 2 * H,
        },
        # running since 03:00: half an hour by "now" (03:30), in the second bucket
        ("physics", "bob", 1): {
            "cpu": 4 * 0.5 * H,
            "gres/gpu": 0.5 * H,
            "mem": 1024 * 0.5 * H,
            "node": 0.5 * H,
            "billing": 4 * 0.5 * H,
        },
        # each run of the requeued job in its own bucket
        ("bio", "alice", 0): {
            "cpu": 4 * 0.5 * H,
            "gres/gpu": 0,
            "mem": 1024 * 0.5 * H,
            "node": 0.5 * H,
            "billing": 4 * 0.5 * H,
        },
        ("bio", "alice", 1): {
            "cpu": 4 * 0.5 * H,
            "gres/gpu": 0,
            "mem": 1024 * 0.5 * H,
            "node": 0.5 * H,
            "billing": 4 * 0.5 * H,
        },
    }


def test_a_run_across_a_bound_is_split() -> None:
    long = job(9, pb.JOB_STATE_COMPLETED, T0 + 0.5 * H, T0 + 2.5 * H, cpus=1, gpus=0)
    got = as_dict(usage_records([long], [T0, T0 + H, T0 + 2 * H], now=T0 + 9 * H))
    assert {k: v["cpu"] for k, v in got.items()} == {
        ("physics", "alice", 0): 0.5 * H,
        ("physics", "alice", 1): H,  # the last half hour is after the window
    }


@pytest.mark.parametrize("bounds", [[], [T0], [T0, T0], [T0 + 1, T0], [T0, float("nan")]])
def test_bad_bounds(bounds: list[float]) -> None:
    with pytest.raises(InvalidRequest):
        check_bounds(bounds)


def test_no_runs_no_records() -> None:
    assert usage_records([], [T0, T0 + H], now=T0) == []
