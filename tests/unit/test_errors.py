"""The one error tree: every CorralError subclass lives in corral/errors.py, its
docstring draws the real tree, and each class has a gRPC status, an HTTP status and
an exit code that agree. (tests/unit/test_error_transport.py sends each class
over both transports.)"""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

from corral import errors
from corral.errors import HTTP_STATUS, CorralError, all_errors, from_wire

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
GRPC_CODES = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
}  # fmt: skip


def docstring_tree() -> list[tuple[int, str, str, int, int]]:
    """(depth, class, gRPC status, HTTP status, exit code) per line of the drawing."""
    rows = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^    ([│├└─ ]*)(\w+)\s+([A-Z_]+)\s+(\d{3})\s+(\d+)", line)
        if m:
            rows.append((len(m[1]) // 4, m[2], m[3], int(m[4]), int(m[5])))
    return rows


def depth(cls: type[CorralError]) -> int:
    return cls.__mro__.index(CorralError)


def test_docstring_draws_the_real_tree() -> None:
    drawn = docstring_tree()
    assert [row[1] for row in drawn] == [c.__name__ for c in all_errors()]
    for (level, name, grpc, http, exit_code), cls in zip(drawn, all_errors(), strict=True):
        assert level == depth(cls), name
        assert (grpc, http, exit_code) == (cls.grpc_code, cls.http_status, cls.exit_code), name


@pytest.mark.parametrize("cls", all_errors(), ids=lambda c: c.__name__)
def test_every_class_maps_on_both_transports(cls: type[CorralError]) -> None:
    assert cls.grpc_code in GRPC_CODES
    assert cls.http_status == HTTP_STATUS[cls.grpc_code]
    assert 1 <= cls.exit_code <= 255
    rebuilt = from_wire(cls.__name__, "why")
    assert type(rebuilt) is cls and rebuilt.message == "why"


def test_no_error_class_lives_outside_the_tree() -> None:
    """A CorralError subclass defined anywhere else would not be rebuilt by the clients."""
    pattern = re.compile(r"^class (\w+)\(", re.M)
    for path in SRC.rglob("*.py"):
        if path.is_relative_to(SRC / "corral" / "wire") or path == SRC / "corral" / "errors.py":
            continue
        rel = path.relative_to(SRC).with_suffix("")
        names = pattern.findall(path.read_text())
        if not names:
            continue
        module = importlib.import_module(".".join(rel.parts).removesuffix(".__init__"))
        for name in names:
            obj = getattr(module, name, None)
            if isinstance(obj, type) and issubclass(obj, CorralError):
                assert obj.__module__ == "corral.errors", f"{rel}: {name} is outside the tree"


def test_no_class_elsewhere_shares_a_name_of_the_tree() -> None:
    """Two classes of one name (noded once had its own InvalidTransition, a RuntimeError)
    are two errors to catch and to word: the tree's is the one."""
    pattern = re.compile(r"^class (\w+)\b", re.M)
    for path in SRC.rglob("*.py"):
        if path.is_relative_to(SRC / "corral" / "wire") or path == SRC / "corral" / "errors.py":
            continue
        for name in pattern.findall(path.read_text()):
            rel = path.relative_to(SRC)
            assert name not in errors.BY_NAME, f"{rel}: {name} is the error tree's name"


def test_unknown_names_fall_back_to_the_base() -> None:
    err = from_wire("NoSuchError", "boom")
    assert type(err) is CorralError and err.message == "boom"
