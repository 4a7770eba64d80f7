import pytest

from corral.errors import InvalidTransition
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js


def new_job() -> pb.Job:
    return pb.Job(job_id=7)


def test_happy_path_records_the_story() -> None:
    job = new_job()
    js.transition(job, "submitted", cause="rpc:SubmitJob", now=1.0)
    js.transition(job, "started", cause="sched:pass=1", now=2.0)
    js.transition(job, "exited", cause="node:n1 report", now=3.0, to=js.COMPLETED)
    assert job.state == js.COMPLETED
    assert [e.event for e in job.events] == ["submitted", "started", "exited"]
    assert [e.cause for e in job.events][1] == "sched:pass=1"
    assert job.events[2].from_state == js.RUNNING


def test_impossible_transitions_raise() -> None:
    job = new_job()
    js.transition(job, "submitted", cause="t", now=0)
    with pytest.raises(InvalidTransition, match="impossible in state PENDING"):
        js.transition(job, "exited", cause="t", now=0, to=js.COMPLETED)
    js.transition(job, "started", cause="t", now=0)
    with pytest.raises(InvalidTransition, match="cannot lead"):
        js.transition(job, "exited", cause="t", now=0, to=js.PENDING)
    js.transition(job, "exited", cause="t", now=0, to=js.FAILED)
    with pytest.raises(InvalidTransition):
        js.transition(job, "cancel_requested", cause="t", now=0)


def test_unknown_event_and_missing_target() -> None:
    job = new_job()
    with pytest.raises(InvalidTransition, match="unknown event"):
        js.transition(job, "teleported", cause="t", now=0)
    js.transition(job, "submitted", cause="t", now=0)
    js.transition(job, "started", cause="t", now=0)
    with pytest.raises(InvalidTransition, match="needs a target"):
        js.transition(job, "exited", cause="t", now=0)


def test_every_finished_state_is_terminal() -> None:
    for final in js.FINISHED:
        for event, (allowed_from, _) in js.EVENTS.items():
            assert final not in allowed_from, (event, final)
