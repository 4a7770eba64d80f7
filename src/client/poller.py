"""poll(2) with what each ready descriptor stands for, without the selectors module.

``selectors`` imports ``collections`` and ``enum`` (and with ``socket`` and ``signal``,
which srun no longer needs either, ~5-10 ms of its start-up: issue 16). srun's loop
needs only register, modify, unregister and which object each ready descriptor is; the
readiness rules are ``selectors.PollSelector``'s, so a hang-up or an error wakes a
reader and a writer alike.
"""

from __future__ import annotations

import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class HasFileno(Protocol):
        def fileno(self) -> int: ...


EVENT_READ = 1
EVENT_WRITE = 2


def _fd(what: int | HasFileno) -> int:
    fd = what if isinstance(what, int) else what.fileno()
    if fd < 0:
        raise ValueError(f"invalid file descriptor: {fd}")
    return fd


def _poll_mask(events: int) -> int:
    return (select.POLLIN if events & EVENT_READ else 0) | (
        select.POLLOUT if events & EVENT_WRITE else 0
    )


class Poller:
    def __init__(self) -> None:
        self._poll = select.poll()
        self._entries: dict[int, tuple[int, Any]] = {}  # fd -> (events, data)

    def register(self, what: int | HasFileno, events: int, data: Any) -> None:
        fd = _fd(what)
        if fd in self._entries:
            raise KeyError(f"{what!r} is already registered")
        self._poll.register(fd, _poll_mask(events))
        self._entries[fd] = (events, data)

    def modify(self, what: int | HasFileno, events: int, data: Any) -> None:
        fd = _fd(what)
        if fd not in self._entries:
            raise KeyError(f"{what!r} is not registered")
        self._poll.modify(fd, _poll_mask(events))
        self._entries[fd] = (events, data)

    def unregister(self, what: int | HasFileno) -> None:
        fd = _fd(what)
        if self._entries.pop(fd, None) is None:
            raise KeyError(f"{what!r} is not registered")
        self._poll.unregister(fd)

    def events(self, what: int | HasFileno) -> int:
        """What ``what`` is registered for; KeyError if it is not."""
        return self._entries[_fd(what)][0]

    def __contains__(self, what: int | HasFileno) -> bool:
        return _fd(what) in self._entries

    def select(self, timeout: float | None) -> list[tuple[Any, int]]:
        """(data, ready events) of each registered descriptor that is ready, waiting at
        most ``timeout`` seconds (None: until one is)."""
        ms = None if timeout is None else max(0, -int(-timeout * 1000 // 1))  # ceil
        ready: list[tuple[Any, int]] = []
        for fd, happened in self._poll.poll(ms):
            entry = self._entries.get(fd)
            if entry is None:
                continue
            mask = EVENT_WRITE if happened & ~select.POLLIN else 0
            if happened & ~select.POLLOUT:
                mask |= EVENT_READ
            if mask & entry[0]:
                ready.append((entry[1], mask & entry[0]))
        return ready

    def close(self) -> None:
        self._entries.clear()
