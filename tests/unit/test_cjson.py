"""corral.cjson (the commands' JSON without the json package) gives what json gives."""

from __future__ import annotations

import json
import math

import pytest

from corral import cjson

VALUES = [
    {"spec": {"script": "#!/bin/sh\n", "argv": ["a b", "é", "\u2028"], "ntasks": 4}},
    {"n": 10**30, "f": 2.5, "neg": -0.0, "t": True, "f2": False, "none": None, "e": []},
    {"tuple": (1, 2), "nested": [{"a": {"b": [[]]}}], "quote": '"\\/\x01'},
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"},
    [],
    {},
    "plain",
    0,
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_is_json_dumps_compact(value: object) -> None:
    assert cjson.dumps(value) == json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize("value", VALUES)
def test_loads_reads_what_json_writes(value: object) -> None:
    text = json.dumps(value, indent=2)
    assert cjson.loads(text.encode()) == json.loads(text)
    assert cjson.loads(f" \n\t{text}\r\n") == json.loads(text)


def test_special_floats_round_trip_as_json() -> None:
    text = cjson.dumps({"inf": math.inf, "ninf": -math.inf, "nan": math.nan})
    assert text == '{"inf":Infinity,"ninf":-Infinity,"nan":NaN}'
    back = cjson.loads(text)
    assert back["inf"] == math.inf and back["ninf"] == -math.inf and math.isnan(back["nan"])


@pytest.mark.parametrize(
    "bad", ["", "  ", "{", "[1,]", "1 2", '{"a":1}x', "nul", "\ufeff{}", '"\x01"', b"\xff"]
)
def test_loads_refuses_what_json_refuses(bad: str | bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        cjson.loads(bad)


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        cjson.dumps({"x": object()})
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        cjson.dumps(loop)
