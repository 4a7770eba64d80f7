"""Dynamic nodes in ctld (issue 27): a node not in the config joins when
[dynamic_nodes] allows it and its call carries its node certificate, with what it
discovered, and takes jobs; without the certificate, past max_nodes, or not allowed,
it is refused."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from corral.config import parse_config
from corral.errors import ConfigError, InvalidNodeName, PermissionDenied
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, make_cluster
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model import jobstate as js

ALICE = Identity("alice", 1000, 1000)


def config(**dynamic: Any) -> Any:
    return parse_config(
        {
            "nodes": [{"names": "n1", "cpus": 2, "memory_mb": 1024}],
            "partitions": [
                {"name": "p", "nodes": "n1", "default": True},
                {"name": "burst", "nodes": "n1"},
            ],
            "dynamic_nodes": dynamic,
        }
    )


def joining(name: str, gpus: int = 2) -> pb.RegisterNodeRequest:
    res = pb.NodeResources(cpus=32, memory_mb=65536)
    for g in range(gpus):
        res.gpus.add(index=g, model="NVIDIA A100-SXM4-80GB", memory_mb=81920)
    return pb.RegisterNodeRequest(name=name, address="10.0.0.7:1", resources=res)


async def make(tmp_path: pathlib.Path, **dynamic: Any) -> Cluster:
    return make_cluster(config(**dynamic), f"sqlite:///{tmp_path}/c.db", clock=ManualClock())


async def test_a_certified_dynamic_node_joins_with_its_discovery_and_takes_a_job(
    tmp_path: pathlib.Path,
) -> None:
    cluster = await make(tmp_path, allow=True, partitions=["burst"])
    node = await cluster.register_node(joining("cloud-7"), certified=True)
    assert node.dynamic and node.partitions == ["burst"] and node.schedulable
    assert node.resources.cpus == 32 and node.gpu_type == "a100" and len(node.gpu_indices) == 2
    assert node.to_wire().dynamic
    assert "cloud-7" in next(p for p in cluster.config.partitions if p.name == "burst").nodes
    spec = pb.JobSpec(
        script="#!/bin/sh\ntrue\n", work_dir="/tmp", partitions=["burst"], gpus=2, gpu_type="a100"
    )
    job = await cluster.submit(ALICE, spec)
    await cluster.schedule_pass()
    while cluster._tasks:
        await asyncio.gather(*list(cluster._tasks))
    assert job.state == js.RUNNING and job.batch_host == "cloud-7"
    again = await cluster.register_node(joining("cloud-7"), certified=True)
    assert again is node  # a re-registration is the same node


async def test_without_a_certificate_a_dynamic_node_is_refused(tmp_path: pathlib.Path) -> None:
    cluster = await make(tmp_path, allow=True)
    with pytest.raises(PermissionDenied, match="needs its node certificate"):
        await cluster.register_node(joining("rogue"))
    assert "rogue" not in cluster.nodes


async def test_not_allowed_or_too_many(tmp_path: pathlib.Path) -> None:
    closed = await make(tmp_path)
    with pytest.raises(InvalidNodeName, match="not in the config"):
        await closed.register_node(joining("x1"), certified=True)
    (tmp_path / "b").mkdir()
    capped = await make(tmp_path / "b", allow=True, max_nodes=1)
    await capped.register_node(joining("x1"), certified=True)
    assert capped.nodes["x1"].partitions == ["p"]  # no partitions named: the default one
    with pytest.raises(PermissionDenied, match="max_nodes"):
        await capped.register_node(joining("x2"), certified=True)
    with pytest.raises(InvalidNodeName):
        await capped.register_node(joining("bad/name"), certified=True)


def test_dynamic_nodes_config() -> None:
    cfg = config(allow=True, partitions=["burst"], gpus={"backend": "fake", "count": 4})
    assert cfg.dynamic_nodes.node_config("d1").gpus.count == 4
    assert config().dynamic_nodes.gpus.backend == "auto" and not config().dynamic_nodes.allow
    with pytest.raises(ConfigError, match="'gpu' is not a partition"):
        config(allow=True, partitions=["gpu"])
