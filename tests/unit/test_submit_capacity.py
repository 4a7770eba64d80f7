"""A submit's check that some partition could ever hold the job (Slurm's "Requested node
configuration is not available") looks at nodes only until enough could (issue 29: it
listed all 12,500 nodes' capacity for every submit)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from corral.config import parse_config
from corral.errors import NodeConfigUnavailable
from corral.wire import corral_pb2 as pb
from ctld.model.validate import NodeCapacity, validate_spec

NODES = 2000


class Counted(Mapping[str, NodeCapacity]):
    """Every node 8 CPUs and 4 GPUs, but n0007 with 8 GPUs; counts the lookups."""

    def __init__(self) -> None:
        self.names = {f"n{i:04d}": None for i in range(1, NODES + 1)}
        self.looked = 0

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> NodeCapacity:
        if name not in self.names:
            raise KeyError(name)
        self.looked += 1
        return NodeCapacity(name, 8, 16_000, 8 if name == "n0007" else 4, "h100")

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


CONFIG = parse_config(
    {
        "nodes": [{"names": f"n[0001-{NODES:04d}]"}],
        "partitions": [{"name": "gpu", "nodes": f"n[0001-{NODES:04d}]", "default": True}],
    }
)


def spec(**kw: object) -> pb.JobSpec:
    base: dict[str, object] = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp", "name": "t"}
    base.update(kw)
    return pb.JobSpec(**base)  # type: ignore[arg-type]


def test_a_job_that_fits_looks_at_as_many_nodes_as_it_needs() -> None:
    capacity = Counted()
    validate_spec(spec(gpus_per_node=2, nodes_min=3), CONFIG, capacity)
    assert capacity.looked == 3
    capacity.looked = 0
    validate_spec(spec(gpus_per_node=8), CONFIG, capacity)  # only n0007 has 8
    assert capacity.looked == 7


def test_what_no_node_could_hold_is_still_refused() -> None:
    with pytest.raises(NodeConfigUnavailable):
        validate_spec(spec(gpus_per_node=8, nodes_min=2), CONFIG, Counted())
    with pytest.raises(NodeConfigUnavailable):
        validate_spec(spec(gpus_per_node=8, exclude="n0007"), CONFIG, Counted())
    with pytest.raises(NodeConfigUnavailable):
        validate_spec(spec(gpus_per_node=8, nodelist="n0001"), CONFIG, Counted())
    validate_spec(spec(gpus_per_node=8, nodelist="n0007"), CONFIG, Counted())
