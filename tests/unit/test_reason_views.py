"""One reason, one node state, in every view (issue 36).

A pending job's reason is decided once (the core's pass) and written once (the job's
``reason``); squeue, sacct, scontrol, the web queue and ``corral why`` all read that
field, and the web and ``corral why`` word it with the same function. A node in a
reservation reads as sinfo says it (maint, resv, mix$) in sinfo, scontrol, ``corral
why NODE`` and the web page's counts. Checked here on the in-process cluster and on the
views' own functions; tests/integration/test_scheduling.py does it through the
daemons.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from client.sacct_values import JOB_VALUES
from client.scontrol_show import complete_state
from client.sinfo_columns import long_state, short_state
from client.squeue_columns import reason, reason_or_nodes
from client.views.job import Job
from client.views.node import Node
from corral.config import parse_config
from corral.identity import Identity
from corral.reasons import Reason, reason_words
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, register_all
from corral.whytext import explain_text, node_text
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js
from ctld.web.cluster_view import shown_state
from tests.unit.test_elastic import settle

ALICE = Identity("alice", 1000, 1000)
ROOT = Identity("root", 0, 0)
MAINT = Reason.RESERVED_FOR_MAINTENANCE


def spec(**kw: Any) -> pb.JobSpec:
    base: dict[str, Any] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    return pb.JobSpec(**{**base, **kw})


async def cluster_with(tmp_path: pathlib.Path, *, flags: list[str]) -> tuple[Cluster, ManualClock]:
    """Two idle nodes, both in a reservation that began 5 minutes ago."""
    clock = ManualClock()
    config = parse_config(
        {
            "nodes": [{"names": "n[1-2]", "cpus": 8}],
            "partitions": [{"name": "p", "nodes": "n[1-2]", "default": True}],
        }
    )
    cluster = make_cluster(
        config, f"sqlite:///{tmp_path}/c.db", clock=clock, dispatcher=RecordingDispatcher()
    )
    await register_all(cluster)
    resv = pb.Reservation(
        name="maint",
        start_time=clock.now,
        end_time=clock.now + 7200,
        nodes="n[1-2]",
        users=["root"],
        flags=flags,
    )
    await cluster.create_reservation(ROOT, resv)
    clock.advance(300)
    return cluster, clock


@pytest.mark.parametrize(
    ("flags", "expected"),
    [(["MAINT"], MAINT), ([], Reason.MAY_BE_RESERVED)],
)
async def test_a_reservation_on_an_idle_cluster_is_the_reason_everywhere(
    tmp_path: pathlib.Path, flags: list[str], expected: str
) -> None:
    cluster, clock = await cluster_with(tmp_path, flags=flags)
    job = await cluster.submit(ALICE, spec(time_limit_s=600))
    await settle(cluster)
    assert job.state == js.PENDING and job.reason == expected
    view = Job(MessageToDict(job))
    assert reason(view) == expected and reason_or_nodes(view) == f"({expected})"  # squeue
    assert JOB_VALUES["Reason"](view, clock.now) == expected  # sacct
    reply = MessageToDict(cluster.explain(ALICE, job.job_id))
    why = explain_text(reply)
    first = why.splitlines()[0]
    assert first == f"Job {job.job_id} (t) is pending: {reason_words(expected)} [{expected}]."
    assert "resources it asks for are busy" not in why
    # the reservation began 5 minutes ago: it holds the nodes since then, not "in 0 s"
    assert "Reservation maint" in why and "since " in why and "(5 min ago)" in why
    assert "in 0 s" not in why
    cluster.store.close()


async def test_a_node_in_a_maintenance_reservation_reads_as_sinfo_says(
    tmp_path: pathlib.Path,
) -> None:
    cluster, _ = await cluster_with(tmp_path, flags=["MAINT"])
    (n1,) = cluster.node_list(["n1"])
    raw = MessageToDict(n1)
    node = Node(raw)
    assert (short_state(node), long_state(node)) == ("maint", "maint")
    assert complete_state(raw) == "IDLE+MAINTENANCE+RESERVED"
    assert node_text(raw).startswith(
        "Node n1 is IDLE+MAINTENANCE+RESERVED.\n"
        "It is in maintenance reservation maint: only that reservation's jobs start there.\n"
    )
    assert shown_state(n1) == "MAINT"  # the web page counts it so, not as IDLE
    cluster.store.close()


def _node(state: str, **kw: Any) -> dict[str, Any]:
    return {"name": "n1", "state": f"NODE_STATE_{state}", "resources": {"cpus": 8}, **kw}


@pytest.mark.parametrize(
    ("state", "kw", "short", "long", "complete", "web"),
    [
        ("IDLE", {"reservation": "r"}, "resv", "reserved", "IDLE+RESERVED", "RESERVED"),
        ("IDLE", {"reservation": "m", "maint": True}, "maint", "maint", None, "MAINT"),
        ("MIXED", {"reservation": "m", "maint": True, "allocCpus": 4}, "mix$", "mixed$",
         "MIXED+MAINTENANCE+RESERVED", "MIXED"),
        ("MIXED", {"reservation": "r", "allocCpus": 4}, "mix", "mixed", "MIXED+RESERVED", "MIXED"),
        ("DRAIN", {"reservation": "m", "maint": True}, "drain$", "drained$",
         "IDLE+DRAIN+MAINTENANCE+RESERVED", "DRAIN"),
        ("DRAINING", {"reservation": "m", "maint": True, "allocCpus": 4}, "drng$", "draining$",
         "MIXED+DRAIN+MAINTENANCE+RESERVED", "DRAINING"),
        ("IDLE", {"spare": True}, "spare", "spare", "IDLE", "SPARE"),
        ("IDLE", {"reservation": "m", "maint": True, "notResponding": True}, "maint*", "maint*",
         "IDLE+MAINTENANCE+RESERVED+NOT_RESPONDING", "MAINT"),
    ],
)  # fmt: skip
def test_node_words_are_slurms(
    state: str, kw: dict[str, Any], short: str, long: str, complete: str | None, web: str
) -> None:
    # Slurm 22.05 on this machine: idle in a MAINT reservation is maint /
    # IDLE+MAINTENANCE+RESERVED, busy is mix$ / MIXED+MAINTENANCE+RESERVED, drained
    # drain$ / IDLE+DRAIN+MAINTENANCE+RESERVED, idle in another reservation resv
    raw = _node(state, **kw)
    node = Node(raw)
    assert (short_state(node), long_state(node)) == (short, long)
    assert complete_state(raw) == (complete or "IDLE+MAINTENANCE+RESERVED")
    wire = pb.Node(
        state=getattr(pb, f"NODE_STATE_{state}"),
        reservation=kw.get("reservation", ""),
        maint=kw.get("maint", False),
        spare=kw.get("spare", False),
    )
    assert shown_state(wire) == web


def test_the_words_of_a_reason_name_what_holds_it() -> None:
    assert "maintenance reservation" in reason_words(MAINT)
    assert "advance reservation" in reason_words(Reason.MAY_BE_RESERVED)
    assert reason_words("ReqNodeNotAvail, UnavailableNodes:n[1-2]") == (
        "nodes it needs are not available: n[1-2] down or drained"
    )
    assert reason_words(Reason.PARTITION_INACTIVE) == "its partition is inactive"
    assert reason_words("Resources") == "the resources it asks for are busy"


def test_times_past_are_said_to_be_past() -> None:
    now = time.time()
    reply = {
        "now": now,
        "job": {"jobId": "5", "state": "JOB_STATE_PENDING", "reason": MAINT, "spec": {}},
        "reservations": [
            {"name": "m", "nodes": "n1", "startTime": now - 7200, "endTime": now + 600,
             "flags": ["MAINT"]},
            {"name": "later", "nodes": "n2", "startTime": now + 120, "endTime": now + 900},
        ],
    }  # fmt: skip
    text = explain_text(reply)
    assert "Reservation m (maintenance) holds n1 since " in text and "(2.0 h ago)" in text
    assert "until " in text and "(in 10 min)" in text
    assert "Reservation later holds n2 from " in text and "(in 2 min)" in text
    # no forecast: it waits its turn behind the reservation
    assert "No start time is forecast yet" in text
