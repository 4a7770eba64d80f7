import pytest

from corral.errors import InvalidOption
from corral.jobsyntax import parse_array, parse_dependency


def test_dependencies() -> None:
    deps, any_of = parse_dependency("afterok:1:2_3,singleton")
    assert not any_of
    assert [(d.kind, d.job_ids) for d in deps] == [("afterok", ("1", "2_3")), ("singleton", ())]
    deps, any_of = parse_dependency("afterany:5?afternotok:6")
    assert any_of and len(deps) == 2


@pytest.mark.parametrize(
    "bad", ["", "after", "before:1", "afterok:x", "singleton:3", "a:1,b:2?c:3"]
)
def test_bad_dependencies(bad: str) -> None:
    with pytest.raises(InvalidOption, match="dependency"):
        parse_dependency(bad)


def test_arrays() -> None:
    assert parse_array("0-15:4").task_ids == (0, 4, 8, 12)
    assert parse_array("1,3,5%2") == parse_array("5,3,1%2")
    assert parse_array("1,3,5%2").max_running == 2
    with pytest.raises(InvalidOption):
        parse_array("3-1")
    with pytest.raises(InvalidOption):
        parse_array("0-10%x")
