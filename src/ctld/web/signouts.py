"""Sign-outs that outlive ctld: per user, the moment before which no session counts.

A sign-out does not list the session it ends; it moves its user's *not-before* past
that session's issue time, so every session of that user issued until then is over
(the user's other browsers too) and the sessions issued after it count. What is kept is
one entry per user who signed out within the last session lifetime: an older entry
can only refuse sessions that have expired anyway, so it is dropped. A lookup is a
dict's; a sign-out updates one entry and drops expired ones from the front of the
entries in sign-out order (each entry is dropped once: O(1) amortized), never a scan.

Durable: each sign-out is one line (``uid not_before_ms``) appended to
``<state_dir>/web.signouts`` and fsynced before the browser is told; ctld reads the
file at start. When the file holds more than twice the lines it needs, it is rewritten
from the entries (a new file, fsynced, renamed over): the file stays within a constant
of the entries, and the rewrite's cost is paid for by the appends that made it due.
The file is ctld's own, 0600, never followed through a link (as ``web.key``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable

from corral.errors import ConfigError

SIGNOUTS_FILE = "web.signouts"
COMPACT_SLACK = 64  # lines beyond twice the entries before the file is rewritten


class SignOuts:
    def __init__(
        self,
        path: str,
        lifetime_s: float,
        clock: Callable[[], float] = time.time,
        *,
        durable: bool = True,
    ) -> None:
        self.path = path
        self.lifetime_ms = int(lifetime_s * 1000)
        self.clock = clock
        self.durable = durable  # fsync each sign-out (a unit test may go without)
        self._entries: OrderedDict[int, int] = OrderedDict()  # uid -> not-before, ms
        self._lines = 0  # lines in the file now
        self.work = 0  # entries looked at, dropped or written: what the bound is about
        self._load()

    def __len__(self) -> int:
        return len(self._entries)

    def not_before(self, uid: int) -> int:
        """The issue time (ms) from which a session of ``uid`` counts; 0: any."""
        return self._entries.get(uid, 0)

    def sign_out(self, uid: int, not_before_ms: int) -> None:
        """Sessions of ``uid`` issued before ``not_before_ms`` count no more, from now
        and after a restart (written and fsynced before this returns)."""
        if not_before_ms <= self._entries.get(uid, 0):
            return
        self._drop_expired()
        self._entries[uid] = not_before_ms
        self._entries.move_to_end(uid)
        self._append(uid, not_before_ms)
        if self._lines > 2 * len(self._entries) + COMPACT_SLACK:
            self._rewrite()

    # ------------------------------------------------------------ memory

    def _drop_expired(self) -> None:
        """Entries are in sign-out order, so the expired ones are at the front (a clock
        set back can leave one behind a newer one: it goes at a later sign-out)."""
        horizon = int(self.clock() * 1000) - self.lifetime_ms
        while self._entries:
            uid, not_before = next(iter(self._entries.items()))
            self.work += 1
            if not_before > horizon:
                return
            del self._entries[uid]

    # ------------------------------------------------------------ the file

    def _open(self, flags: int) -> int:
        fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            os.close(fd)
            raise ConfigError(
                f"{self.path}: the web sign-outs must be ctld's own and mode 0600 (it is "
                f"owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
            )
        return fd

    def _load(self) -> None:
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ConfigError(
                f"{self.path}: cannot read the web sign-outs: {exc.strerror}"
            ) from None
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
        found: dict[int, int] = {}
        for line in data.split(b"\n"):
            parts = line.split()
            # a line cut short by a crash was never acknowledged: skipped
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                uid, not_before = int(parts[0]), int(parts[1])
                found[uid] = max(not_before, found.get(uid, 0))
        for uid, not_before in sorted(found.items(), key=lambda e: e[1]):
            self._entries[uid] = not_before
        self._drop_expired()
        try:  # what is kept, in whole lines: a line a crash cut short glues to nothing
            self._rewrite()
        except OSError as exc:
            raise ConfigError(
                f"{self.path}: cannot rewrite the web sign-outs: {exc.strerror}"
            ) from None

    def _append(self, uid: int, not_before_ms: int) -> None:
        with os.fdopen(self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT), "wb") as fh:
            fh.write(f"{uid} {not_before_ms}\n".encode())
            fh.flush()
            if self.durable:
                os.fsync(fh.fileno())
        self._lines += 1
        self.work += 1

    def _rewrite(self) -> None:
        tmp = f"{self.path}.new"
        with contextlib.suppress(FileNotFoundError):  # a rewrite a crash cut short
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write("".join(f"{uid} {nb}\n" for uid, nb in self._entries.items()).encode())
            fh.flush()
            if self.durable:
                os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        if self.durable:
            dirfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
            try:
                os.fsync(dirfd)
            finally:
                os.close(dirfd)
        self._lines = len(self._entries)
        self.work += len(self._entries)
