"""The commands' field masks (client/fieldmasks.py): every column prints the same from a
job masked to its table's fields as from the whole job, for jobs and nodes with every
field set, in each state; and a column the tables do not know sends no mask."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from client.acctfields import ACCT_FIELDS
from client.fieldmasks import (
    SACCT_ROW,
    SINFO,
    SQUEUE,
    SQUEUE_ROW,
    sacct_fields,
    sinfo_fields,
    squeue_fields,
)
from client.fmt import parse_format
from client.sacct import format_accounting
from client.sinfo import VIEWS, format_sinfo
from client.squeue import DEFAULT_SORT, LONG_FORMAT, START_FORMAT, format_jobs, long_format
from client.squeue_columns import COLUMNS, LONG_COLUMNS, sort_keys
from corral.wire import corral_pb2 as pb
from ctld.codec.fieldmask import FieldMask
from ctld.codec.jsonmap import message_to_json

JOB_STATES = ("PENDING", "RUNNING", "COMPLETED", "CANCELLED", "TIMEOUT", "FAILED")
NODE_STATES = ("IDLE", "MIXED", "ALLOCATED", "DRAIN", "DOWN")


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def fill(msg: Message, seed: int, depth: int = 0) -> None:
    """Every field of ``msg`` set to a value of its own (``seed`` varies them)."""
    for fd in msg.DESCRIPTOR.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key, value = fd.message_type.fields
            if value.message_type is None:
                getattr(msg, fd.name)[scalar(key, seed)] = scalar(value, seed)
            continue
        if fd.message_type is not None:
            if depth >= 3:
                continue
            if fd.is_repeated:
                for _ in range(2):
                    fill(getattr(msg, fd.name).add(), seed + 1, depth + 1)
            else:
                fill(getattr(msg, fd.name), seed + 1, depth + 1)
            continue
        value = scalar(fd, seed)
        if fd.is_repeated:
            getattr(msg, fd.name).extend([value, value])
        else:
            setattr(msg, fd.name, value)


def scalar(fd: FieldDescriptor, seed: int) -> Any:
    if fd.enum_type is not None:
        return fd.enum_type.values[min(2, len(fd.enum_type.values) - 1)].number
    if fd.type == FieldDescriptor.TYPE_STRING:
        return f"{fd.name}{seed}"
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return True
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 1_700_000_000.0 + 1000 * seed + fd.number
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return b"x"
    return 3 + seed + fd.number % 7


def masked(msg: Message, desc: Descriptor, paths: list[str] | None) -> dict[str, Any]:
    """``msg`` as a command reads it, masked to ``paths`` (protobuf's own FieldMask; the
    fast JSON mapping, which test_jsonmap holds equal to MessageToDict)."""
    if paths is not None:
        msg = FieldMask(desc, paths, "test").apply(msg)
    return message_to_json(msg)


def jobs(state: str, *, array: bool = True) -> list[pb.Job]:
    out = []
    for seed in range(3):
        job = pb.Job()
        fill(job, seed)
        job.job_id = 100 + seed
        job.state = pb.JobState.Value(f"JOB_STATE_{state}")
        job.array_job_id = 100 if array else 0
        job.spec.allocation_only = seed == 2  # batch jobs (an N.batch line) and one not
        if not array:
            job.ClearField("array_task_id")
        out.append(job)
    return out


def squeue_out(
    msgs: list[pb.Job], fmt: Any, sort: str, paths: list[str] | None, states: Any
) -> str:
    reply = {"now": 1_700_050_000.0, "jobs": [masked(m, pb.Job.DESCRIPTOR, paths) for m in msgs]}
    return format_jobs(reply, fmt, sort=sort, states=states)  # type: ignore[arg-type]


def squeue_same(fmt: Any, keys: list[str], sort: str = DEFAULT_SORT) -> None:
    paths = squeue_fields(keys, sort)
    assert paths is not None, keys
    for state in JOB_STATES:
        for array in (True, False):
            msgs = jobs(state, array=array)
            whole = squeue_out(msgs, fmt, sort, None, None)
            assert squeue_out(msgs, fmt, sort, paths, None) == whole, (keys, state, array)


@pytest.mark.parametrize("letter", sorted(COLUMNS))
def test_squeue_each_letter_prints_the_same_masked(letter: str) -> None:
    squeue_same(f"%{letter}", [letter])


@pytest.mark.parametrize("name", sorted(n for n in LONG_COLUMNS if SQUEUE[n] is not None))
def test_squeue_each_long_field_prints_the_same_masked(name: str) -> None:
    specs = long_format(name)
    squeue_same(specs, [s.letter for s in specs])


@pytest.mark.parametrize("fmt", [LONG_FORMAT, START_FORMAT])
def test_squeue_default_formats(fmt: str) -> None:
    squeue_same(fmt, [s.letter for s in parse_format(fmt)[1]])


@pytest.mark.parametrize("key", sorted(sort_keys()))
def test_squeue_each_sort_key_orders_the_same_masked(key: str) -> None:
    squeue_same("%i", ["i"], sort=f"-{key}")


def test_squeue_unknown_or_unlisted_column_sends_no_mask() -> None:
    assert squeue_fields(["stdout"], "") is None
    assert squeue_fields(["no-such"], "") is None
    assert squeue_fields(["i"], "?") is None
    assert set(SQUEUE_ROW) <= set(squeue_fields(["d"], "") or ())
    assert "nodelist" in (squeue_fields(["i"], "", nodelist=True) or ())


def test_squeue_tables_name_every_column_and_only_real_fields() -> None:
    assert set(SQUEUE) == set(COLUMNS) | set(LONG_COLUMNS)
    for fields in SQUEUE.values():
        FieldMask(pb.Job.DESCRIPTOR, list(fields or ()), "test")


def sacct_out(msgs: list[pb.Job], name: str, steps: bool, paths: list[str] | None) -> str:
    reply = {"now": 1_700_050_000.0, "jobs": [masked(m, pb.Job.DESCRIPTOR, paths) for m in msgs]}
    return format_accounting(reply, name, steps=steps)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [n for n, _, _ in ACCT_FIELDS])
@pytest.mark.parametrize("steps", [False, True])
def test_sacct_each_field_prints_the_same_masked(name: str, steps: bool) -> None:
    paths = sacct_fields([name], steps=steps, arrays=False)
    assert paths is not None, name
    FieldMask(pb.Job.DESCRIPTOR, paths, "test")
    for state in JOB_STATES:
        for array in (True, False):
            msgs = jobs(state, array=array)
            whole = sacct_out(msgs, name, steps, None)
            assert sacct_out(msgs, name, steps, paths) == whole, (name, state, array)


def test_sacct_row_and_filters_and_arrays() -> None:
    paths = sacct_fields(["JobID"], steps=False, arrays=True, matching=["account"]) or []
    assert {*SACCT_ROW, "account", "spec.array_tasks"} <= set(paths)
    assert "steps" not in paths
    assert "steps" in (sacct_fields(["JobID"], steps=True, arrays=False) or [])


def test_sacct_field_printed_but_not_in_the_tables_sends_no_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from client import fieldmasks

    monkeypatch.delitem(fieldmasks.SACCT_JOB, "Partition")
    assert sacct_fields(["Partition"], steps=False, arrays=False) is None


def nodes(state: str) -> list[dict[str, Any]]:
    out = []
    for seed in range(3):
        node = pb.Node()
        fill(node, seed % 2)  # two nodes alike: they share a line where nothing differs
        node.name = f"n{seed}"
        node.state = pb.NodeState.Value(f"NODE_STATE_{state}")
        out.append(node)
    return out  # type: ignore[return-value]


def sinfo_same(fmt: str | None, view: str) -> None:
    letters = [s.letter for s in parse_format(fmt or VIEWS[view][0])[1]]
    paths = sinfo_fields(letters)
    assert paths is not None, letters
    parts = [{"name": "p", "nodes": "n[0-2]", "isDefault": True}]
    for state in NODE_STATES:
        msgs: Any = nodes(state)
        outs = [
            format_sinfo(
                parts,  # type: ignore[arg-type]
                [masked(m, pb.Node.DESCRIPTOR, p) for m in msgs],  # type: ignore[misc]
                1_700_050_000.0,
                fmt=fmt,
                view=view,
            )
            for p in (None, paths)
        ]
        assert outs[0] == outs[1], (fmt, view, state)


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_sinfo_each_view_prints_the_same_masked(view: str) -> None:
    sinfo_same(None, view)


@pytest.mark.parametrize("letter", sorted(set("abBcCdDeEfFgGhHlLmnNoOpPrRsStTuUvVwXYZz")))
def test_sinfo_each_letter_prints_the_same_masked(letter: str) -> None:
    sinfo_same(f"%{letter}", "default")
    sinfo_same(f"%{letter}", "node")


def test_sinfo_unknown_letter_sends_no_mask() -> None:
    assert sinfo_fields(["q"]) is None


_ALIVE: list[object] = []  # jsonmap caches plans by a Skip's identity: none may be reused


@pytest.mark.parametrize("state", JOB_STATES)
def test_gateway_encoding_of_each_mask_is_the_masked_copys(state: str) -> None:
    """The gateway's JSON (fields outside the mask skipped, a few read one by one) is
    what protobuf's own mask and MessageToDict give, for every mask the tables make."""
    from ctld.codec import fieldmask
    from ctld.codec.jsonmap import message_to_json

    masks = [squeue_fields([k], "") for k in SQUEUE]
    masks += [sacct_fields([n], steps=s, arrays=True) for n, _, _ in ACCT_FIELDS for s in (0, 1)]
    masks.append(["job_id", "state", "spec.name", "steps", "usage", "allocations"])
    for job in jobs(state):
        for paths in masks:
            if paths is None:
                continue
            mask = FieldMask(pb.Job.DESCRIPTOR, paths, "test")
            fieldmask._SKIPS.clear()  # more masks than ctld keeps Skips for
            skip = mask.skip({})
            assert skip is not None
            _ALIVE.append(skip)
            assert message_to_json(job, skip) == json_format.MessageToDict(mask.apply(job))
    for node in nodes("MIXED"):
        for view in VIEWS:
            letters = [s.letter for s in parse_format(VIEWS[view][0])[1]]
            mask = FieldMask(pb.Node.DESCRIPTOR, sinfo_fields(letters) or [], "test")
            fieldmask._SKIPS.clear()
            skip = mask.skip({})
            assert skip is not None
            _ALIVE.append(skip)
            assert message_to_json(node, skip) == json_format.MessageToDict(mask.apply(node))


def cleared_variants(state: str) -> Iterator[list[pb.Job]]:
    """The filled jobs with one field (of the job or its spec) cleared in turn: a value
    that falls back to another field when one is unset (``a or b``) reads both."""
    for holder in ("", "spec"):
        desc = pb.JobSpec.DESCRIPTOR if holder else pb.Job.DESCRIPTOR
        for fd in desc.fields:
            msgs = jobs(state)
            for m in msgs:
                (m.spec if holder else m).ClearField(fd.name)
            yield msgs


def cached_reply(
    msgs: list[pb.Job], paths: list[str] | None, cache: dict[Any, Any]
) -> dict[str, Any]:
    key = tuple(paths) if paths is not None else None
    if key not in cache:
        jobs = [masked(m, pb.Job.DESCRIPTOR, paths) for m in msgs]
        cache[key] = {"now": 1_700_050_000.0, "jobs": jobs}
    out: dict[str, Any] = cache[key]
    return out


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "CANCELLED"])
def test_each_column_with_each_field_unset_prints_the_same_masked(state: str) -> None:
    squeue_masks = {k: squeue_fields([k], "") for k in SQUEUE if SQUEUE[k] is not None}
    sacct_masks = {n: sacct_fields([n], steps=True, arrays=False) for n, _, _ in ACCT_FIELDS}
    formats: dict[str, Any] = {k: f"%{k}" if len(k) == 1 else long_format(k) for k in SQUEUE}
    for msgs in cleared_variants(state):
        cache: dict[Any, Any] = {}
        whole = cached_reply(msgs, None, cache)
        for key, paths in squeue_masks.items():
            part = cached_reply(msgs, paths, cache)
            fmt = formats[key]
            expected = format_jobs(whole, fmt, sort="", states=None)  # type: ignore[arg-type]
            assert format_jobs(part, fmt, sort="", states=None) == expected, key  # type: ignore[arg-type]
        for name, paths in sacct_masks.items():
            part = cached_reply(msgs, paths, cache)
            expected = format_accounting(whole, name, steps=True)  # type: ignore[arg-type]
            assert format_accounting(part, name, steps=True) == expected, name  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["IDLE", "DRAIN"])
def test_sinfo_each_letter_with_each_node_field_unset_prints_the_same(state: str) -> None:
    parts: Any = [{"name": "p", "nodes": "n[0-2]", "isDefault": True}]
    letters = sorted(k for k in SINFO if SINFO[k] is not None)
    for fd in pb.Node.DESCRIPTOR.fields:
        msgs = nodes(state)
        for m in msgs:
            m.ClearField(fd.name)  # type: ignore[attr-defined]
        if fd.name == "name":
            continue  # a node without a name is in no partition: nothing to show
        for letter in letters:
            paths = sinfo_fields([letter])
            outs = [
                format_sinfo(parts, [masked(m, pb.Node.DESCRIPTOR, p) for m in msgs], 1.0, fmt=f)
                for p in (None, paths)
                for f in (f"%{letter}",)
            ]
            assert outs[0] == outs[1], (fd.name, letter)
