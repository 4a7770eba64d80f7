"""proto3's JSON mapping, fast: what ``json_format.MessageToDict`` returns, in a fraction of
the time, for the gateway's large replies (squeue over thousands of jobs).

The output is the same mapping (camelCase names, unset fields omitted, 64-bit integers
as strings, enums by name, bytes as base64); ``tests/unit/test_jsonmap.py`` checks it
against ``MessageToDict`` field by field. ``skip`` drops fields by name per message type,
so a reply leaves out job scripts and stories without copying the job first.
"""

from __future__ import annotations

import base64
import keyword
import math
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

Skip = Mapping[str, frozenset[str]]  # message full name -> field names to leave out
Convert = Callable[[Any], Any]

_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_NO_SKIP: Skip = {}


def _float(value: float) -> Any:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _scalar(fd: FieldDescriptor, skip: Skip) -> Convert:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return lambda v: message_to_json(v, skip)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        assert fd.enum_type is not None
        names = {v.number: v.name for v in fd.enum_type.values}
        return lambda v: names.get(v, v)
    if fd.type in _INT64:
        return str
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _float
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return lambda v: base64.b64encode(v).decode()
    return _same


def _same(value: Any) -> Any:
    """A string, bool or 32-bit integer: proto3 JSON's value is Python's."""
    return value


def _converter(fd: FieldDescriptor, skip: Skip) -> Convert:
    msg_type = fd.message_type
    if msg_type is not None and msg_type.GetOptions().map_entry:
        key_fd, value_fd = msg_type.fields_by_name["key"], msg_type.fields_by_name["value"]
        conv_value = _scalar(value_fd, skip)
        key_str = (
            (lambda k: "true" if k else "false")
            if (key_fd.type == FieldDescriptor.TYPE_BOOL)
            else str
        )
        return lambda m: {key_str(k): conv_value(v) for k, v in m.items()}
    one = _scalar(fd, skip)
    if fd.is_repeated:
        return lambda values: [one(v) for v in values]
    return one


Plan = dict[str, tuple[str, Convert] | None]
# a plan's kept fields read one by one, when few are kept (a field mask's: squeue's or
# sacct's dozen of a job's fifty): (name, JSON name, convert, has presence, repeated)
Kept = list[tuple[str, str, Convert, bool, bool]]
Encode = Callable[[Any], dict[str, Any]]
FEW = 16  # kept fields up to which reading each beats ListFields (which reads all set)

_CACHE: dict[tuple[int, int], tuple[Plan, Encode | None]] = {}


def _compiled(kept: Kept) -> Encode:
    """The few kept fields' reads as one straight-line function, made once per plan:
    squeue and sacct encode 100,000 jobs with it, and a loop over the fields that unpacks
    a tuple and calls ``getattr`` for each cost twice as much. The names are the
    descriptor's own (a field mask names only known fields), read with ``getattr``
    where a name is no Python identifier."""
    env: dict[str, Any] = {"str": str}
    lines = ["def encode(msg):", "    out = {}"]
    for i, (name, json_name, convert, presence, repeated) in enumerate(kept):
        read = (
            f"msg.{name}"
            if name.isidentifier() and not keyword.iskeyword(name)
            else f"getattr(msg, {name!r})"
        )
        env[f"convert{i}"] = convert
        value = "v" if convert is _same else "str(v)" if convert is str else f"convert{i}(v)"
        if presence:
            lines.append(f"    if msg.HasField({name!r}):")
            lines.append(f"        v = {read}")
            lines.append(f"        out[{json_name!r}] = {value}")
            continue
        lines.append(f"    v = {read}")
        # proto3: a field at its default is not set, so not shown (an empty repeated too)
        lines.append(f"    if {'len(v)' if repeated else 'v'}:")
        lines.append(f"        out[{json_name!r}] = {value}")
    lines.append("    return out")
    exec("\n".join(lines), env)  # the source is made above, from descriptors only
    encode: Encode = env["encode"]
    return encode


def _plan(desc: Descriptor, skip: Skip) -> tuple[Plan, Encode | None]:
    key = (id(desc), id(skip))
    hit = _CACHE.get(key)
    if hit is None:
        dropped = skip.get(desc.full_name, frozenset())
        plan: Plan = {
            fd.name: None if fd.name in dropped else (fd.json_name, _converter(fd, skip))
            for fd in desc.fields
        }
        kept: Kept = [
            (fd.name, entry[0], entry[1], fd.has_presence, fd.is_repeated)
            for fd in desc.fields
            if (entry := plan[fd.name]) is not None
        ]
        few = len(kept) <= FEW and len(kept) < len(plan)  # a mask's few, not a small type
        hit = _CACHE[key] = (plan, _compiled(kept) if few else None)
    return hit


def message_to_json(msg: Message, skip: Skip = _NO_SKIP) -> dict[str, Any]:
    """``MessageToDict(msg)``, minus the fields ``skip`` names. ``skip`` should be a
    module-level constant: conversion plans are cached by its identity."""
    plan, encode = _plan(msg.DESCRIPTOR, skip)  # type: ignore[arg-type]  # upb's Descriptor
    if encode is not None:  # few fields kept: read each, not every set field
        return encode(msg)
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        entry = plan[fd.name]
        if entry is not None:
            out[entry[0]] = entry[1](value)
    return out
