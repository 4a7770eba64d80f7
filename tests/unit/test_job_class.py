"""The scheduler's job class (``JobRequest.klass``) is made of every field the core reads.

The core decides once per class (a class-mate of a job that found no start gets its
verdict), so a field left out of the class would silently give a job another job's
plan. The class is derived from the dataclass's fields minus an explicit exclusion
list; these tests hold that every other field, including one added later, tells
classes apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ctld.sched import JobRequest
from ctld.sched.model import NOT_IN_CLASS

pytestmark = pytest.mark.timeout(30)

BASE = JobRequest(1, ("p",))


def other(value: Any) -> Any:
    """A value of ``value``'s type that differs from it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return (*value, "x")
    raise AssertionError(f"no other value for {value!r}: teach this test the new field's type")


def init_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init]


def test_the_exclusions_name_real_fields() -> None:
    # a renamed field must not leave a stale name here (and its new name in the class)
    assert set(init_fields(JobRequest)) >= NOT_IN_CLASS


@pytest.mark.parametrize("name", init_fields(JobRequest))
def test_every_field_but_the_exclusions_tells_classes_apart(name: str) -> None:
    changed = dataclasses.replace(BASE, **{name: other(getattr(BASE, name))})
    if name in NOT_IN_CLASS:
        assert changed.klass == BASE.klass, f"{name} is excluded: alike jobs share a class"
    else:
        assert changed.klass != BASE.klass, f"{name} is read by the core: not in the class"


def test_a_field_added_later_is_in_the_class_without_being_listed() -> None:
    @dataclasses.dataclass(frozen=True)
    class Wider(JobRequest):
        new_flag: bool = False  # a scheduling field nobody added to any list

    plain = Wider(1, ("p",))
    flagged = Wider(1, ("p",), new_flag=True)
    assert flagged.klass != plain.klass
    # the excluded fields still are not
    assert Wider(2, ("p",), priority=9, submit_time=5.0).klass == plain.klass


def test_equal_requests_share_a_class_and_a_priority_copy_keeps_it() -> None:
    a = JobRequest(1, ("p",), gpus_per_node=2, user="u", time_limit_s=60)
    b = JobRequest(2, ("p",), gpus_per_node=2, user="u", time_limit_s=60, priority=5)
    assert a.klass == b.klass
    assert a.with_priority(7).klass == a.klass
