"""Fuzzed Controller APIs on a real ctld: random and mutated requests over HTTP (the Unix
socket, as root) and gRPC (with a token). Every answer is a clear error or a success,
never an internal error or a hang; afterwards ctld still serves, and a restarted ctld
loads the same jobs from the store."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.wire import corral_pb2 as pb

pytestmark = pytest.mark.timeout(300)
METHODS = [
    "SubmitJob",
    "CancelJobs",
    "GetJobs",
    "QueryAccounting",
    "GetNodes",
    "UpdateJob",
    "UpdateNode",
    "ExplainJob",
    "CreateReservation",
    "CreateStep",
    "CompleteJob",
    "StepNodeLost",
    "NoSuchMethod",
]
CLEAR = {200, 400, 401, 403, 404, 409}  # never 500: every refusal is a named error
FUZZ = settings(
    max_examples=150,
    deadline=10_000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
spec_keys = st.sampled_from(
    [
        "script",
        "workDir",
        "nodesMin",
        "ntasks",
        "gpus",
        "timeLimitS",
        "array",
        "dependency",
        "environment",
        "argv",
        "partitions",
        "nodelist",
        "signal",
        "memPerNodeMb",
        "begin_time",
    ]
)
spec_like = st.dictionaries(spec_keys, json_values, max_size=6)


@pytest.fixture(scope="module")
def fuzzed(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(nodes=1, gpus_per_node=2)


def post(cluster: LocalCluster, method: str, body: bytes) -> tuple[int, bytes]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(cluster.socket)
        s.sendall(
            f"POST /corral.v1.Controller/{method} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


@FUZZ
@given(method=st.sampled_from(METHODS), body=json_values)
def test_http_random_json(fuzzed: LocalCluster, method: str, body: Any) -> None:
    status, payload = post(fuzzed, method, json.dumps(body).encode())
    assert status in CLEAR, (method, body, payload[:300])
    if status != 200:
        assert json.loads(payload)["message"]


@FUZZ
@given(spec=spec_like, hold=st.booleans())
def test_http_random_job_specs(fuzzed: LocalCluster, spec: dict[str, Any], hold: bool) -> None:
    spec = {"script": "#!/bin/sh\ntrue\n", "workDir": "/tmp", **spec, "hold": True}
    status, payload = post(fuzzed, "SubmitJob", json.dumps({"spec": spec}).encode())
    assert status in CLEAR, (spec, payload[:300])


@FUZZ
@given(body=st.binary(max_size=300))
def test_http_random_bytes(fuzzed: LocalCluster, body: bytes) -> None:
    status, _ = post(fuzzed, "SubmitJob", body)
    assert status in CLEAR


def _mutants(seed: int, base: bytes, n: int) -> Iterator[bytes]:
    rnd = random.Random(seed)
    for _ in range(n):
        data = bytearray(base)
        for _ in range(rnd.randint(1, 6)):
            op = rnd.randrange(3)
            if op == 0 and data:
                data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
            elif op == 1 and data:
                del data[rnd.randrange(len(data)) :]
            else:
                data.insert(rnd.randrange(len(data) + 1), rnd.randrange(256))
        yield bytes(data)


def test_grpc_mutated_messages(fuzzed: LocalCluster) -> None:
    spec = pb.JobSpec(
        script="#!/bin/sh\ntrue\n",
        work_dir="/tmp",
        hold=True,
        environment={"A": "b"},
        argv=["x"],
        array="0-3",
        dependency="afterok:1",
    )
    seeds = {
        "SubmitJob": pb.SubmitJobRequest(spec=spec).SerializeToString(),
        "GetJobs": pb.GetJobsRequest(
            filter=pb.JobFilter(job_ids=[1, 2], users=["root"]), with_spec=True
        ).SerializeToString(),
        "CancelJobs": pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[1])).SerializeToString(),
        "UpdateNode": pb.UpdateNodeRequest(names=["node01"], state="RESUME").SerializeToString(),
    }
    md = fuzzed.grpc_metadata()
    bad = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}

    async def run() -> dict[str, int]:
        seen: dict[str, int] = {}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{fuzzed.grpc_port}") as channel:
            for method, base in seeds.items():
                call = channel.unary_unary(f"/corral.v1.Controller/{method}")
                for i, data in enumerate(_mutants(hash(method) & 0xFFFF, base, 150)):
                    try:
                        await call(data, metadata=md, timeout=10)
                        code = grpc.StatusCode.OK
                    except grpc.aio.AioRpcError as exc:
                        code = exc.code()
                        assert code not in bad, (method, i, data, exc.details())
                    seen[code.name] = seen.get(code.name, 0) + 1
        return seen

    seen = asyncio.run(run())
    assert "INVALID_ARGUMENT" in seen  # the mutations did reach the decoder's refusals


def test_ctld_survives_and_its_store_reloads(fuzzed: LocalCluster) -> None:
    before = fuzzed.client().call("GetJobs", {"withEvents": False}).get("jobs", [])
    fuzzed.stop_process("ctld")
    fuzzed.start_ctld()
    after = fuzzed.client().call("GetJobs", {"withEvents": False}).get("jobs", [])
    key = lambda jobs: sorted((j["jobId"], j["state"], j.get("user")) for j in jobs)  # noqa: E731
    assert key(before) == key(after)
