"""ReportUsage through ctld's API, on both stores: running jobs count up to now, and
with private_data = ["accounting"] a user gets only their own usage (operators all)."""

from __future__ import annotations

import asyncio

import pytest

from corral.config import AuthConfig, parse_config
from corral.errors import InvalidRequest
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.wire import corral_pb2 as pb
from ctld.api.auth import ClusterAuthenticator
from ctld.api.rpc import ControllerApi
from ctld.model import jobstate as js

CONFIG = parse_config(
    {
        "controller": {"operators": ["daemon"], "private_data": ["accounting"]},
        "nodes": [{"names": "n[1-2]", "cpus": 8, "gpus": {"backend": "fake", "count": 2}}],
        "partitions": [{"name": "gpu", "nodes": "n[1-2]", "default": True, "max_time": "1:00:00"}],
    }
)
ALICE = Identity("alice", 1000, 1000)
BOB = Identity("bob", 1001, 1001)
OPERATOR = Identity("daemon", 1, 1)


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


async def test_usage_by_who_asks(store_url: str) -> None:
    clock = ManualClock()
    cluster = make_cluster(CONFIG, store_url, clock=clock, dispatcher=RecordingDispatcher())
    try:
        await register_all(cluster)
        a = await cluster.submit(ALICE, spec(cpus_per_task=2, gpus_per_node=1))
        b = await cluster.submit(BOB, spec())
        await cluster.schedule_pass()
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
        assert a.state == b.state == js.RUNNING
        start = clock()
        clock.advance(100)
        api = ControllerApi(cluster, ClusterAuthenticator(AuthConfig()))
        req = pb.ReportUsageRequest(bounds=[start - 50, start + 50, start + 1000])

        def by_key(resp: pb.ReportUsageResponse) -> dict[tuple[str, int], dict[str, float]]:
            return {(r.user, r.bucket): dict(r.tres_s) for r in resp.records}

        everyone = await api.report_usage(req, OPERATOR)
        got = by_key(everyone)
        assert sorted(got) == [("alice", 0), ("alice", 1), ("bob", 0), ("bob", 1)]
        assert got[("alice", 0)]["cpu"] == 2 * 50 and got[("alice", 0)]["gres/gpu"] == 50
        assert got[("alice", 1)]["cpu"] == 2 * 50  # running: up to now, not the bucket's end
        assert got[("bob", 1)]["gres/gpu"] == 0
        assert (
            everyone.capacity["cpu"] == 16 and everyone.capacity["gres/gpu"] == 16
        )  # as the nodes registered (8 each)
        assert everyone.capacity["node"] == 2
        assert {p.account for p in everyone.accounts} >= {"root"}
        mine = by_key(await api.report_usage(req, ALICE))
        assert sorted(mine) == [("alice", 0), ("alice", 1)]  # private_data: her own only
        only_bob = await api.report_usage(
            pb.ReportUsageRequest(bounds=[start, start + 200], users=["bob"]), OPERATOR
        )
        assert {r.user for r in only_bob.records} == {"bob"}
        with pytest.raises(InvalidRequest):
            await api.report_usage(pb.ReportUsageRequest(bounds=[start]), OPERATOR)
    finally:
        cluster.store.close()
