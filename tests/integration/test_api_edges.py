"""Hostile and malformed input on both transports: a clear error, nothing created."""

from __future__ import annotations

import json
import socket

import grpc
import pytest

from corral.errors import InvalidRequest, PermissionDenied
from corral.identity import current_identity
from corral.testing import LocalCluster
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg


def raw_post(
    cluster: LocalCluster, method: str, body: bytes, headers: str = ""
) -> tuple[int, dict]:
    host, port = cluster.http_address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            f"POST /corral.v1.Controller/{method} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload or b"{}")


def test_gateway_rejects_malformed_and_anonymous_requests(cluster: LocalCluster) -> None:
    ident = current_identity()
    who = f"Authorization: Bearer {cluster.token(ident.user)}\r\n"
    status, body = raw_post(cluster, "SubmitJob", b"{not json", who)
    assert status == 400 and body["error"] == "InvalidRequest"
    status, body = raw_post(cluster, "SubmitJob", b'{"spec": {"noSuchField": 1}}', who)
    assert status == 400 and "noSuchField" in body["message"]
    status, body = raw_post(cluster, "SubmitJob", b'{"spec": {"nodesMin": -4}}', who)
    assert status == 400
    status, body = raw_post(cluster, "SubmitJob", b'{"spec": {"script": "#!/bin/sh"}}')
    assert status == 401 and body["error"] == "Unauthenticated"
    # a stated identity is no identity: the old headers are ignored
    claimed = f"x-corral-user: {ident.user}\r\nx-corral-uid: {ident.uid}\r\n"
    status, body = raw_post(cluster, "SubmitJob", b'{"spec": {"script": "#!/bin/sh"}}', claimed)
    assert status == 401 and body["error"] == "Unauthenticated"
    status, body = raw_post(cluster, "NoSuchMethod", b"{}", who)
    assert status == 400 and "unknown method" in body["message"]
    assert cluster.client().get_jobs({}).get("jobs", []) == []


def test_rest_client_maps_errors_to_the_hierarchy(cluster: LocalCluster) -> None:
    client = cluster.client()
    with pytest.raises(InvalidRequest, match="working directory"):
        client.submit_job({"spec": {"script": "#!/bin/sh\n", "workDir": "rel"}})
    other = cluster.tcp_client(token=cluster.token("nobody"))
    job_id = client.submit_job(
        {"spec": {"script": "#!/bin/sh\n", "workDir": "/tmp", "hold": True}}
    )["jobId"]
    out = other.cancel_jobs({"filter": {"jobIds": [job_id]}})["outcomes"]
    assert out[0]["error"] == "PermissionDenied"
    with pytest.raises(PermissionDenied):
        raise PermissionDenied(out[0]["message"])


async def test_grpc_needs_identity_and_validates(cluster: LocalCluster) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetJobs(pb.GetJobsRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetJobs(pb.GetJobsRequest(), metadata=[("x-corral-uid", "0")])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        md = cluster.grpc_metadata()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitJob(
                pb.SubmitJobRequest(
                    spec=pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", partitions=["nope"])
                ),
                metadata=md,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Invalid partition name specified" in (err.value.details() or "")
        assert dict(err.value.trailing_metadata() or ())["x-corral-error"] == "InvalidPartition"
        reply = await stub.SubmitJob(
            pb.SubmitJobRequest(spec=pb.JobSpec(script="#!/bin/sh\n", work_dir="/tmp", hold=True)),
            metadata=md,
        )
        assert reply.job_id >= 1
