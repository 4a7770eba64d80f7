"""sinfo views from GetPartitions/GetNodes replies (proto3 JSON), as Slurm prints them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.sinfo import choose_view, format_sinfo, node_filter
from corral.errors import InvalidOption

NOW = 1796212800.0  # 2026-12-02T12:00:00Z


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def node(name: str, state: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "address": f"127.0.0.{name[-1]}:4000",
        "state": f"NODE_STATE_{state}",
        "resources": {
            "cpus": 16,
            "memoryMb": "65536",
            "gpus": [{"index": i, "model": "NVIDIA H100 80GB HBM3"} for i in range(8)],
            "sockets": 2,
            "coresPerSocket": 8,
            "threadsPerCore": 1,
        },
        "partitions": ["debug"],
        "version": "0.1.0",
        "gpuType": "h100",
    }
    out.update(kw)
    return out


PARTS = [
    {
        "name": "debug",
        "nodes": "node[01-04]",
        "isDefault": True,
        "state": "UP",
        "maxTimeS": "86400",
        "defaultTimeS": "-1",
        "totalNodes": 4,
        "totalCpus": 64,
    },
    {"name": "gpu", "nodes": "node[03-04]", "state": "UP", "maxTimeS": "-1", "totalNodes": 2},
]
NODES = [
    node("node01", "MIXED", allocCpus=4, allocMemMb="2048", allocGpus=2, jobIds=["7"]),
    node("node02", "IDLE"),
    node("node03", "DOWN", reason="Not responding", reasonTime=NOW - 3600),
    node("node04", "DRAIN", reason="disk failing", reasonTime=NOW - 60),
]


def test_default_view_groups_by_partition_and_state() -> None:
    assert format_sinfo(PARTS, NODES, NOW) == (
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "debug*       up 1-00:00:00      1  down* node03\n"
        "debug*       up 1-00:00:00      1  drain node04\n"
        "debug*       up 1-00:00:00      1    mix node01\n"
        "debug*       up 1-00:00:00      1   idle node02\n"
        "gpu          up   infinite      1  down* node03\n"
        "gpu          up   infinite      1  drain node04\n"
    )


def test_idle_nodes_share_one_line_compressed() -> None:
    nodes = [node(f"node0{i}", "IDLE") for i in range(1, 5)]
    out = format_sinfo(PARTS[:1], nodes, NOW, header=False)
    assert out == "debug*       up 1-00:00:00      4   idle node[01-04]\n"


def test_partition_column_widens_for_long_names() -> None:
    parts = [{**PARTS[0], "name": "interactive-gpu"}]
    out = format_sinfo(parts, [node("node02", "IDLE")], NOW)
    assert out.splitlines() == [
        "PARTITION        AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "interactive-gpu*    up 1-00:00:00      1   idle node02",
    ]


def test_empty_partition_still_shows() -> None:
    parts = [{"name": "empty", "nodes": "", "state": "UP", "maxTimeS": "3600"}]
    out = format_sinfo(parts, NODES, NOW, header=False)
    assert out == "empty        up    1:00:00      0    n/a \n"


def test_node_long_view_matches_slurms_columns() -> None:
    out = format_sinfo(PARTS[:1], NODES, NOW, view="node_long", long_date=True)
    assert out.splitlines() == [
        "Wed Dec 02 12:00:00 2026",
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE "
        "REASON              ",
        "node01         1    debug*       mixed 16      2:8:1  65536        0      1   (null) "
        "none                ",
        "node02         1    debug*        idle 16      2:8:1  65536        0      1   (null) "
        "none                ",
        "node03         1    debug*       down* 16      2:8:1  65536        0      1   (null) "
        "Not responding      ",
        "node04         1    debug*     drained 16      2:8:1  65536        0      1   (null) "
        "disk failing        ",
    ]


def test_node_view_lists_a_node_once_per_partition() -> None:
    out = format_sinfo(PARTS, NODES, NOW, view="node")
    assert out.splitlines() == [
        "NODELIST   NODES PARTITION STATE ",
        "node01         1    debug* mix   ",
        "node02         1    debug* idle  ",
        "node03         1    debug* down* ",
        "node03         1       gpu down* ",
        "node04         1    debug* drain ",
        "node04         1       gpu drain ",
    ]


def test_reasons_view_lists_unusable_nodes_once() -> None:
    out = format_sinfo(PARTS, NODES, NOW, view="reasons")
    assert out.splitlines() == [
        "REASON               USER      TIMESTAMP           NODELIST",
        "Not responding       root      2026-12-02T11:00:00 node03",
        "disk failing         root      2026-12-02T11:59:00 node04",
    ]


def test_long_and_summary_views() -> None:
    out = format_sinfo(PARTS[:1], NODES[:2], NOW, view="long")
    assert out.splitlines() == [
        "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE "
        "NODELIST",
        "debug*       up 1-00:00:00 1-infinite   no       NO        all      1       mixed node01",
        "debug*       up 1-00:00:00 1-infinite   no       NO        all      1        idle node02",
    ]
    out = format_sinfo(PARTS, NODES, NOW, view="summary")
    assert out.splitlines() == [
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST",
        "debug*       up 1-00:00:00          1/1/2/4 node[01-04]",
        "gpu          up   infinite          0/0/2/2 node[03-04]",
    ]


def test_format_fields() -> None:
    out = format_sinfo(PARTS[:1], NODES, NOW, fmt="%P|%a|%l|%D|%t|%T|%N|%c|%m|%G|%E|%C")
    assert out.splitlines() == [
        "PARTITION|AVAIL|TIMELIMIT|NODES|STATE|STATE|NODELIST|CPUS|MEMORY|GRES|REASON|"
        "CPUS(A/I/O/T)",
        "debug*|up|1-00:00:00|1|down*|down*|node03|16|65536|gpu:h100:8|Not responding|0/0/16/16",
        "debug*|up|1-00:00:00|1|drain|drained|node04|16|65536|gpu:h100:8|disk failing|0/0/16/16",
        "debug*|up|1-00:00:00|1|mix|mixed|node01|16|65536|gpu:h100:8|none|4/12/0/16",
        "debug*|up|1-00:00:00|1|idle|idle|node02|16|65536|gpu:h100:8|none|0/16/0/16",
    ]


def test_format_without_state_merges_states() -> None:
    out = format_sinfo(PARTS, NODES, NOW, fmt="%R %D %C %F", header=False)
    assert out == "debug 4 4/28/32/64 1/1/2/4\ngpu 2 0/0/32/32 0/0/2/2\n"


def test_format_errors() -> None:
    with pytest.raises(InvalidOption, match="Invalid node format specification: k"):
        format_sinfo(PARTS, NODES, NOW, fmt="%P %k")


def test_filters_and_views_from_options() -> None:
    keep = node_filter({"states": "idle,drain", "nodes": "node[02-04]"})
    assert [n["name"] for n in NODES if keep(n)] == ["node02", "node04"]
    with pytest.raises(InvalidOption):
        node_filter({"states": "sleepy"})
    assert choose_view({"node": True, "long": True}) == "node_long"
    assert choose_view({"reasons": True}) == "reasons"
    assert choose_view({"long": True}) == "long"
    assert choose_view({}) == "default"
    out = format_sinfo(PARTS[:1], NODES, NOW, keep=keep, header=False)
    assert out == (
        "debug*       up 1-00:00:00      1  drain node04\n"
        "debug*       up 1-00:00:00      1   idle node02\n"
    )
