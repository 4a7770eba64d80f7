"""ETTR (corral/ettr.py, docs/reliability.md): the arithmetic, and the interruption
records ctld writes at a requeue, read back as sacct's fields."""

from __future__ import annotations

import pathlib

import pytest
from google.protobuf.json_format import MessageToDict

from client.ettr_fields import ettr_values
from client.views.job import Job
from corral.ettr import Interrupted, cause_of, ettr, lost_work
from corral.identity import Identity
from corral.testing.inprocess import RecordingDispatcher, make_cluster
from corral.whytext import explain_text
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js
from tests.unit.test_elastic import ALICE, config, elastic, make, settle, silence


def test_every_second_is_useful_lost_or_overhead() -> None:
    # first start 0 (at 100), interrupted at 1000 after a checkpoint at 900, restarted
    # at 1030, ended at 2000: lost 100, overhead 30, useful 1900 - 130
    one = Interrupted(time=1000, lost_s=lost_work(100, 900, 1000), next_start=1030)
    figures = ettr(100, 2000, [one], now=5000)
    assert (figures.wall_s, figures.lost_s, figures.overhead_s) == (1900, 100, 30)
    assert figures.useful_s == 1770 and figures.ratio == pytest.approx(1770 / 1900)
    # still waiting to restart: the wait so far is overhead
    waiting = Interrupted(time=1000, lost_s=100, next_start=0)
    assert ettr(100, 0, [waiting], now=1060).overhead_s == 60
    assert ettr(0, 0, [], now=10).ratio is None  # never started


def test_a_mark_from_an_earlier_run_is_no_checkpoint_of_this_one() -> None:
    assert lost_work(run_start=500, checkpoint_time=400, ended=800) == 300
    assert lost_work(run_start=500, checkpoint_time=700, ended=800) == 100
    assert lost_work(run_start=500, checkpoint_time=0, ended=800) == 300


def test_causes() -> None:
    assert cause_of("node n2 DOWN: Not responding") == "node_fail"
    assert cause_of("progress stalled on node n1 rank 0") == "hang"
    assert cause_of("x", preempted=True) == "preemption"
    assert cause_of("x", disruption="node n1 drained: dimm") == "drain"
    assert cause_of("x", disruption="maintenance reservation r starts") == "maintenance"


async def test_a_node_failure_is_recorded_with_its_lost_work_and_restart(
    tmp_path: pathlib.Path,
) -> None:
    cluster, clock, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, elastic())
    await settle(cluster)
    first = clock()
    assert job.state == js.RUNNING and job.first_start_time == first
    clock.advance(100)
    # the batch host's heartbeat carries the job's last checkpoint mark (noded's live.py)
    beat = pb.HeartbeatRequest(name=job.batch_host)
    beat.usage.add(job_id=job.job_id, ntasks=1, checkpoint_time=clock() - 20)
    assert cluster.heartbeat(beat)
    cluster.state.live.record(beat)  # as rpc.py's heartbeat does
    await silence(cluster, clock, "n3", 11)  # n3 goes DOWN at the timeout
    assert job.state == js.PENDING
    (rec,) = job.interruptions
    assert rec.cause == "node_fail" and "n3" in rec.detail and not rec.next_start
    assert rec.checkpoint_time == first + 80
    assert rec.lost_s == pytest.approx(rec.time - (first + 80))
    clock.advance(5)
    await settle(cluster)
    restarted = clock()
    assert job.state == js.RUNNING and job.interruptions[0].next_start == restarted
    assert job.first_start_time == first  # the first start stays
    clock.advance(1000)
    values = ettr_values(Job(MessageToDict(job)), clock())  # type: ignore[arg-type]
    assert values["Interruptions"] == "1" and values["InterruptCauses"] == "node_fail:1"
    overhead = restarted - rec.time  # the rest of silence()'s 11 s, and 5
    assert values["RestartOverhead"] == f"00:00:{round(overhead):02d}"
    lost = round(rec.lost_s)
    assert values["LostTime"] == f"00:00:{lost:02d}"
    wall = clock() - first
    assert values["ETTR"] == f"{100 * (wall - overhead - rec.lost_s) / wall:.1f}%"
    why = explain_text(MessageToDict(cluster.queries.explain(ALICE, job.job_id)))
    assert "Interruptions: 1 (node_fail 1); work lost since checkpoints 00:00:" in why
    assert f"ETTR {(wall - overhead - rec.lost_s) / wall:.1%} of" in why, why
    # what the store keeps (sacct reads it): the same, after a ctld restart too
    cluster.store.close()
    again = make_cluster(
        config(), f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=RecordingDispatcher()
    )
    assert list(again.state.jobs[job.job_id].interruptions) == list(job.interruptions)
    again.store.close()


async def test_an_operators_down_is_an_operator_interruption(tmp_path: pathlib.Path) -> None:
    cluster, _, _ = await make(tmp_path)
    job = await cluster.submit(ALICE, elastic())
    await settle(cluster)
    admin = Identity("root", 0, 0)
    await cluster.update_node(admin, pb.UpdateNodeRequest(names=["n2"], state="DOWN", reason="fan"))
    assert job.state == js.PENDING and job.interruptions[-1].cause == "operator"
