"""Server-side field masks (``fields``, ctld/codec/fieldmask.py) on GetJobs, QueryAccounting
and GetNodes, over real gRPC and the JSON gateway: an answer carries only the fields
named, a message's own field by a dotted path, and an unknown name is refused."""

from __future__ import annotations

import json

import grpc
import pytest

from corral.identity import current_identity
from corral.testing import LocalCluster
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from tests.integration.test_api_edges import raw_post

pytestmark = pytest.mark.timeout(120)


def _set_fields(msg: object) -> set[str]:
    return {fd.name for fd, _ in msg.ListFields()}  # type: ignore[attr-defined]


async def test_grpc_answers_carry_only_the_masked_fields(cluster: LocalCluster) -> None:
    md = cluster.grpc_metadata()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        spec = pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", hold=True, name="masked")
        job_id = (await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=md)).job_id
        fields = ["job_id", "state", "spec.name"]
        reply = await stub.GetJobs(
            pb.GetJobsRequest(filter=pb.JobFilter(job_ids=[job_id]), fields=fields), metadata=md
        )
        (job,) = reply.jobs
        assert _set_fields(job) == {"job_id", "state", "spec"}
        assert _set_fields(job.spec) == {"name"} and job.spec.name == "masked"
        assert job.job_id == job_id and job.state == pb.JOB_STATE_PENDING
        assert reply.now > 0  # the answer's own fields stay
        whole = await stub.GetJobs(
            pb.GetJobsRequest(filter=pb.JobFilter(job_ids=[job_id])), metadata=md
        )
        assert {"user", "partition", "submit_time"} <= _set_fields(whole.jobs[0])

        acct = await stub.QueryAccounting(
            pb.QueryAccountingRequest(filter=pb.JobFilter(job_ids=[job_id]), fields=["job_id"]),
            metadata=md,
        )
        assert [_set_fields(j) for j in acct.jobs] == [{"job_id"}]

        nodes = await stub.GetNodes(pb.GetNodesRequest(fields=["name", "state"]), metadata=md)
        assert nodes.nodes and all(_set_fields(n) <= {"name", "state"} for n in nodes.nodes)
        assert {n.name for n in nodes.nodes} == set(cluster.node_names)

        for bad, words in (
            (["no_such_field"], "unknown field 'no_such_field'"),
            (["spec.nope"], "JobSpec has no field 'nope'"),
            (["events.time"], "goes whole"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetJobs(pb.GetJobsRequest(fields=bad), metadata=md)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in (err.value.details() or "")


def test_the_gateway_masks_json_answers(cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit_job(
        {"spec": {"script": "#!/bin/sh\n", "workDir": "/tmp", "hold": True, "name": "gw"}}
    )["jobId"]
    who = f"Authorization: Bearer {cluster.token(current_identity().user)}\r\n"
    body = {"filter": {"jobIds": [str(job_id)]}, "fields": ["job_id", "spec.name"]}
    for _ in range(2):  # the second answer comes from the encoding cache
        status, reply = raw_post(cluster, "GetJobs", json.dumps(body).encode(), who)
        assert status == 200, reply
        assert reply["jobs"] == [{"jobId": str(job_id), "spec": {"name": "gw"}}]
    status, reply = raw_post(
        cluster,
        "QueryAccounting",
        json.dumps({"filter": {"jobIds": [str(job_id)]}, "fields": ["state"]}).encode(),
        who,
    )
    assert status == 200 and reply["jobs"] == [{"state": "JOB_STATE_PENDING"}]
    status, reply = raw_post(cluster, "GetNodes", json.dumps({"fields": ["name"]}).encode(), who)
    assert status == 200 and all(set(n) == {"name"} for n in reply["nodes"])
    status, reply = raw_post(cluster, "GetNodes", json.dumps({"fields": ["bogus"]}).encode(), who)
    assert status == 400 and reply["error"] == "InvalidRequest"
    assert "unknown field 'bogus'" in reply["message"]
