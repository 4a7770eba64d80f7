"""A job's story and a node's recent changes through the API ``corral history`` reads
(QueryAccounting ``with_events``, GetNodes ``with_history``, on the in-process harness:
ctld's real API, store and state machines), and their words (corral/storytext.py)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from corral.identity import Identity
from corral.storytext import NODE_HISTORY, job_story, node_history, recent_changes
from corral.testing.inprocess import InProcessCluster

pytestmark = pytest.mark.timeout(60)

ROOT = Identity("root", 0, 0)
ALICE = Identity("alice", 1000, 1000)
BOB = Identity("bob", 1001, 1001)


@pytest.fixture
def harness(tmp_path: pathlib.Path) -> Iterator[InProcessCluster]:
    with InProcessCluster(
        tmp_path, nodes=2, controller_config='private_data = ["jobs"]\nmin_job_age_s = 60'
    ) as c:
        c.register_nodes()
        yield c


def submit(c: InProcessCluster, who: Identity) -> str:
    spec = {"name": "story", "script": "#!/bin/sh\ntrue\n", "workDir": "/tmp", "timeLimitS": 600}
    return str(c.client(who).submit_job({"spec": spec})["jobId"])


def story(c: InProcessCluster, who: Identity, job_id: str) -> list[dict[str, object]]:
    reply = c.client(who).query_accounting(
        {"filter": {"jobIds": [job_id]}, "duplicates": True, "withEvents": True}
    )
    return list(reply.get("jobs") or [])  # type: ignore[arg-type]


def test_a_finished_jobs_story_comes_from_the_store_after_it_left_memory(
    harness: InProcessCluster,
) -> None:
    job_id = submit(harness, ALICE)
    harness.settle()  # the scheduler starts it
    harness.exit(job_id)
    harness.tick(120)  # past min_job_age: it leaves ctld's memory
    harness.restart()
    assert int(job_id) not in harness.cluster.jobs
    (job,) = story(harness, ALICE, job_id)
    events = [e["event"] for e in job["events"]]  # type: ignore[index, union-attr]
    assert events[0] == "submitted" and "started" in events
    assert job["state"] == "JOB_STATE_COMPLETED"
    text = job_story([job])
    assert text.startswith(f"Job {job_id} (story) of alice is COMPLETED: {len(events)} event(s)")
    assert "-> PENDING" in text and "PENDING -> RUNNING" in text
    # sacct's answer stays without events
    plain = harness.client(ALICE).query_accounting({"filter": {"jobIds": [job_id]}})
    assert "events" not in plain["jobs"][0]


def test_a_story_is_for_those_who_may_list_the_job(harness: InProcessCluster) -> None:
    job_id = submit(harness, ALICE)
    assert story(harness, BOB, job_id) == []  # private_data = jobs: as squeue -j
    assert len(story(harness, ROOT, job_id)) == 1  # an operator sees it
    # sacct (no events asked) keeps its own rule: accounting is not private here
    assert harness.client(BOB).query_accounting({"filter": {"jobIds": [job_id]}})["jobs"]


def test_a_requeued_jobs_story_lists_its_earlier_runs(harness: InProcessCluster) -> None:
    job_id = submit(harness, ALICE)
    harness.settle()
    harness.client(ROOT).update_job({"jobIds": [job_id], "action": "JOB_UPDATE_REQUEUE"})
    harness.exit(job_id, exit_signal=15)
    harness.settle()
    runs = story(harness, ALICE, job_id)
    assert len(runs) == 2 and "events" not in runs[0]  # the earlier run: a row of its own
    text = job_story(runs)
    assert "Earlier runs (1):" in text and "requeued" in text


def test_a_nodes_changes_are_kept_bounded_and_given_only_when_asked(
    harness: InProcessCluster,
) -> None:
    root = harness.client(ROOT)
    for i in range(NODE_HISTORY):  # drain and resume: two changes each
        root.update_node({"names": ["node01"], "state": "DRAIN", "reason": f"fan {i}"})
        root.update_node({"names": ["node01"], "state": "RESUME"})
    assert "history" not in root.get_nodes({"names": ["node01"]})["nodes"][0]
    (node,) = root.get_nodes({"names": ["node01"], "withHistory": True})["nodes"]
    history = node["history"]
    assert len(history) == NODE_HISTORY  # the oldest (its registration) pushed out
    assert [c["event"] for c in history[-2:]] == ["drained", "undrained"]
    assert history[-2]["cause"].startswith("rpc:UpdateNode")
    assert all(c["cause"] for c in history)
    masked = root.get_nodes({"names": ["node01"], "fields": ["name", "history"]})["nodes"][0]
    assert "history" not in masked  # asked by with_history only, as GetJobs' events
    masked = root.get_nodes(
        {"names": ["node01"], "fields": ["name", "history"], "withHistory": True}
    )["nodes"][0]
    assert len(masked["history"]) == NODE_HISTORY
    text = node_history(node)
    assert text.startswith(f"Node node01 is IDLE: {NODE_HISTORY} change(s), oldest first")
    assert f"ctld keeps the last {NODE_HISTORY}" in text
    tail = recent_changes(node)
    assert tail.startswith("Recent changes, oldest first (5 of 24 kept: corral history node01")


def test_a_kept_drain_begins_the_history_after_a_restart(harness: InProcessCluster) -> None:
    harness.client(ROOT).update_node({"names": ["node02"], "state": "DRAIN", "reason": "psu"})
    harness.restart()
    (node,) = harness.client(ROOT).get_nodes({"names": ["node02"], "withHistory": True})["nodes"]
    first = node["history"][0]
    assert (first["event"], first["cause"][:14]) == ("drained", "rpc:UpdateNode")


def test_no_control_character_of_a_story_reaches_the_terminal() -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07line\nbreak\r\u2028"
    job = {
        "jobId": "5",
        "user": "bob",
        "state": "JOB_STATE_FAILED",
        "spec": {"name": "n\x1bame"},
        "events": [{"time": 1.0, "event": "failed", "cause": hostile, "detail": hostile}],
    }
    node = {"name": "n1", "history": [{"event": "drained", "cause": hostile, "detail": hostile}]}
    for text in (job_story([job]), node_history(node)):
        assert not any(ord(c) < 0x20 and c != "\n" for c in text)
        assert "\x7f" not in text and "\u2028" not in text
        assert text.count("\n") == len(text.splitlines())  # each line ends where we end it
