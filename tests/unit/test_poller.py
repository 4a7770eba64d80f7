"""client.poller: srun's poll loop without selectors, with selectors.PollSelector's
readiness rules (a hang-up wakes a reader; events are what was asked for)."""

from __future__ import annotations

import contextlib
import os
import selectors
from collections.abc import Iterator

import pytest

from client.poller import EVENT_READ, EVENT_WRITE, Poller


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_reports_the_data_of_what_is_ready_and_only_the_events_asked_for(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    poller = Poller()
    poller.register(r, EVENT_READ, "reader")
    poller.register(w, EVENT_READ | EVENT_WRITE, "writer")
    assert poller.select(0) == [("writer", EVENT_WRITE)]
    os.write(w, b"x")
    assert sorted(poller.select(0)) == [("reader", EVENT_READ), ("writer", EVENT_WRITE)]


def test_a_hang_up_wakes_a_reader_as_selectors_does(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(w)
    poller, reference = Poller(), selectors.PollSelector()
    poller.register(r, EVENT_READ, "reader")
    reference.register(r, selectors.EVENT_READ, "reader")
    ours = poller.select(0)
    theirs = [(key.data, mask) for key, mask in reference.select(0)]
    assert ours == theirs == [("reader", EVENT_READ)]


def test_modify_unregister_and_membership(pipe: tuple[int, int]) -> None:
    r, w = pipe
    poller = Poller()
    poller.register(w, EVENT_READ, "w")
    assert w in poller and poller.events(w) == EVENT_READ
    assert poller.select(0) == []
    poller.modify(w, EVENT_WRITE, "w2")
    assert poller.events(w) == EVENT_WRITE
    assert poller.select(0) == [("w2", EVENT_WRITE)]
    poller.unregister(w)
    assert w not in poller
    with pytest.raises(KeyError):
        poller.unregister(w)
    with pytest.raises(KeyError):
        poller.modify(w, EVENT_READ, None)
    poller.register(r, EVENT_READ, None)
    with pytest.raises(KeyError):
        poller.register(r, EVENT_READ, None)


def test_a_closed_object_is_refused_by_its_negative_descriptor() -> None:
    class Closed:
        def fileno(self) -> int:
            return -1

    with pytest.raises(ValueError):
        Poller().register(Closed(), EVENT_READ, None)


def test_select_waits_at_most_the_timeout(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    poller = Poller()
    poller.register(r, EVENT_READ, None)
    assert poller.select(0.01) == []
