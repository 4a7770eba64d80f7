"""The fast JSON mapping is proto3's: compared with json_format.MessageToDict."""

from __future__ import annotations

from google.protobuf import json_format

from corral.wire import corral_pb2 as pb
from ctld.codec.jsonmap import message_to_json


def rich_job() -> pb.Job:
    job = pb.Job(
        job_id=2**40,
        user="alice",
        uid=0,
        state=pb.JOB_STATE_RUNNING,
        hold=pb.HOLD_NONE,
        time_limit_s=-1,
        submit_time=1.5,
        exit_code=-3,
        cancelled_by_uid=0,
        nodelist="n[1-2]",
        mem_mb=2**35,
    )
    job.spec.name = "x"
    job.spec.script = "#!/bin/sh\n"
    job.spec.environment["A"] = "1"
    job.spec.environment["B"] = ""
    job.spec.partitions.extend(["a", "b"])
    job.spec.hold = True
    job.spec.begin_time = float("inf")
    job.allocations.add(node="n1", cpus=2, gpu_indices=[0, 3])
    job.allocations.add(node="n2")
    job.events.add(time=1.0, event="submitted", to_state=pb.JOB_STATE_PENDING, cause="c")
    return job


def test_matches_message_to_dict() -> None:
    for msg in (
        rich_job(),
        pb.Job(),
        pb.GetNodesResponse(nodes=[pb.Node(name="n", state=3)]),
        pb.JobStatusUpdate(kind=pb.JobStatusUpdate.KIND_EXITED, exit_signal=9),
    ):
        assert message_to_json(msg) == json_format.MessageToDict(msg)


def test_skip_drops_fields_without_touching_the_message() -> None:
    job = rich_job()
    skip = {
        "corral.v1.Job": frozenset({"events"}),
        "corral.v1.JobSpec": frozenset({"script", "environment"}),
    }
    out = message_to_json(job, skip)
    assert "events" not in out and "script" not in out["spec"]
    assert "environment" not in out["spec"] and out["spec"]["name"] == "x"
    assert job.events and job.spec.script


def test_every_message_type_filled_maps_as_message_to_dict() -> None:
    """Every message of the proto with every field set (a plan of few fields reads each
    field, one of many lists the set ones: both paths), and each with one field only."""
    from tests.unit.test_fieldmasks import fill

    for desc in pb.DESCRIPTOR.message_types_by_name.values():
        msg = getattr(pb, desc.name)()
        fill(msg, 1)
        assert message_to_json(msg) == json_format.MessageToDict(msg), desc.name
        for fd in desc.fields:
            one = getattr(pb, desc.name)()
            if fd.message_type is not None or fd.is_repeated:
                continue
            setattr(one, fd.name, getattr(msg, fd.name))
            assert message_to_json(one) == json_format.MessageToDict(one), (desc.name, fd.name)
            if fd.has_presence:  # proto3 optional set to its default: shown
                zero = getattr(pb, desc.name)()
                setattr(zero, fd.name, type(getattr(msg, fd.name))())
                assert message_to_json(zero) == json_format.MessageToDict(zero), fd.name


_SKIPS: list[object] = []  # plans are cached by a Skip's identity: keep each alive


def test_every_message_type_with_few_fields_kept_maps_as_the_cleared_copy() -> None:
    """A skip that keeps few fields (the read-each-field path) gives what MessageToDict
    gives for a copy with the other fields cleared."""
    from tests.unit.test_fieldmasks import fill

    for desc in pb.DESCRIPTOR.message_types_by_name.values():
        names = [fd.name for fd in desc.fields]
        for kept in (names[:3], names[-2:], names[1::4][:16]):
            skip = {desc.full_name: frozenset(n for n in names if n not in kept)}
            _SKIPS.append(skip)
            msg = getattr(pb, desc.name)()
            fill(msg, 2)
            copy = getattr(pb, desc.name)()
            copy.CopyFrom(msg)
            for name in names:
                if name not in kept:
                    copy.ClearField(name)
            assert message_to_json(msg, skip) == json_format.MessageToDict(copy), desc.name
