import pytest

from corral import hostlist
from corral.errors import InvalidRequest


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node01", ["node01"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("a[1-2]-ib[0-1]", ["a1-ib0", "a1-ib1", "a2-ib0", "a2-ib1"]),
        ("n1,gpu[01-02],n1", ["n1", "gpu01", "gpu02"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert hostlist.expand(expr) == names


@pytest.mark.parametrize("bad", ["node[1-", "node]1", "node[3-1]", "node[a-b]", "n[[1]]"])
def test_expand_rejects_malformed(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid hostlist"):
        hostlist.expand(bad)


def test_expand_refuses_huge_ranges() -> None:
    with pytest.raises(InvalidRequest, match="more than"):
        hostlist.expand("n[0-99999999]")


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["node01", "node02", "node03", "node05"], "node[01-03,05]"),
        (["node1"], "node1"),
        (["gpu1", "gpu2", "login"], "gpu[1-2],login"),
        ([], ""),
        # a padded range goes on past its padding at the same width, as Slurm's does
        ([f"node{i:04d}" for i in range(998, 1002)], "node[0998-1001]"),
        (["n09", "n10", "n11"], "n[09-11]"),
        (["n1", "n01"], "n1,n01"),  # two hosts: 1 is not 01
    ],
)
def test_compress(names: list[str], expr: str) -> None:
    assert hostlist.compress(names) == expr


def test_roundtrip() -> None:
    names = [f"node{i:03d}" for i in (1, 2, 3, 10, 11, 40)]
    assert hostlist.expand(hostlist.compress(names)) == names
