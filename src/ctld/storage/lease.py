"""The controllers' lease, in PostgreSQL: which ctld is primary, with a fencing token.

One row (``corral_controller_lease``) says who holds the lease, until when, and its
token. A standby takes the lease only once it has expired, and every take adds one to
the token; the primary renews it every third of ``controller.lease_s``. Times are the
database's own clock (``clock_timestamp()``), so the controllers' clocks never matter.

Why a lease row and not a session advisory lock as the lease: such a lock lives as long
as its session, so a primary that hangs (stopped, swapping, cut off behind a live TCP
connection) would keep it for ever, and the lock carries no number a commit could be
checked against. The row expires on its own when the primary stops renewing, and its
token fences: every group commit first takes a shared transaction-scoped advisory lock
and reads the token, in its own transaction, and fails with NotPrimary unless the token
is still this ctld's. A takeover holds that lock exclusively while it updates the row,
so it waits for a commit in flight and the commit after it sees the new token: a
deposed primary that wakes up can no longer write, and therefore never acknowledges
anything (ctld acknowledges only what is durable).

The table is made on demand (CREATE TABLE IF NOT EXISTS), outside the Alembic schema:
it is coordination, not data, it exists only on PostgreSQL, and a store is the same
store with or without a standby. SQLite offers no failover (one file on one host).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from corral.errors import NotPrimary, StoreUnavailable

log = structlog.get_logger("ctld")

TABLE = "corral_controller_lease"
KEY = "ctld"

_CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL
)"""
_SEED = (
    f"INSERT INTO {TABLE} (name, holder, token, expires_at, acquired_at) "
    "VALUES (:key, '', 0, 'epoch', 'epoch') ON CONFLICT (name) DO NOTHING"
)
# a take: only an expired lease (or one this controller still holds after a restart of
# its renewal), and always a new token
_TAKE = (
    f"UPDATE {TABLE} SET holder = :me, token = token + 1, "
    "expires_at = clock_timestamp() + make_interval(secs => :lease), "
    "acquired_at = clock_timestamp() "
    "WHERE name = :key AND expires_at < clock_timestamp() RETURNING token"
)
_RENEW = (
    f"UPDATE {TABLE} SET expires_at = clock_timestamp() + make_interval(secs => :lease) "
    "WHERE name = :key AND token = :token AND holder = :me RETURNING token"
)
_RELEASE = (
    f"UPDATE {TABLE} SET expires_at = clock_timestamp() - interval '1 second' "
    "WHERE name = :key AND token = :token"
)
_READ = (
    f"SELECT holder, token, EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS left_s "
    f"FROM {TABLE} WHERE name = :key"
)
# the fence and a take serialize on a transaction-scoped advisory lock (in memory: a
# row lock FOR SHARE would write the row, and halve the commits/s of a lone submitter);
# the token is read after the shared lock is held, so a commit that waited for a take
# reads its new token (READ COMMITTED: each statement sees what committed before it)
# one lock per schema: stores side by side in one database never wait for each other
LOCK_ID = f"hashtext(current_schema() || '.{TABLE}')"
# (with the idle timeout in the same round trip; the token is read by a statement of
# its own: one statement's snapshot is taken before it waits for the lock)
_FENCE_LOCK = (
    "SELECT set_config('idle_in_transaction_session_timeout', :idle_ms, true), "
    f"pg_advisory_xact_lock_shared({LOCK_ID})"
)
_TAKE_LOCK = f"SELECT pg_advisory_xact_lock({LOCK_ID})"
_FENCE = f"SELECT token FROM {TABLE} WHERE name = :key"


@dataclass(frozen=True)
class Holder:
    """The lease as last read: who holds it, its token, seconds until it expires."""

    holder: str
    token: int
    left_s: float

    @property
    def live(self) -> bool:
        return bool(self.holder) and self.left_s > 0


class Lease:
    """This controller's side of the lease (blocking calls: run them in a thread)."""

    def __init__(self, engine: Engine, me: str, lease_s: float) -> None:
        self.engine = engine
        self.me = me
        self.lease_s = lease_s
        self.token = 0  # the token this controller holds; 0: none
        self.last: Holder = Holder("", 0, 0.0)  # the lease as last read
        self.on_lost: Callable[[str], None] = lambda why: None

    def ensure(self) -> None:
        """The table and its one row (idempotent; two controllers may race here)."""
        for attempt in range(3):
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.text(_CREATE))
                    conn.execute(sa.text(_SEED), {"key": KEY})
                return
            except sa.exc.IntegrityError:  # concurrent CREATE TABLE: the other one won
                if attempt == 2:
                    raise

    def read(self) -> Holder:
        with self.engine.connect() as conn:
            row = conn.execute(sa.text(_READ), {"key": KEY}).one()
        self.last = Holder(str(row.holder), int(row.token), float(row.left_s))
        return self.last

    def try_acquire(self) -> bool:
        """Take the lease if it has expired; True if this controller holds it now."""
        params = {"key": KEY, "me": self.me, "lease": self.lease_s}
        with self.engine.begin() as conn:
            # wait for a commit in flight (it holds the row), but not for ever
            conn.execute(sa.text(f"SET LOCAL lock_timeout = {int(self.lease_s * 1000)}"))
            conn.execute(sa.text(_TAKE_LOCK))
            token = conn.execute(sa.text(_TAKE), params).scalar()
        if token is None:
            self.read()
            return False
        self.token = int(token)
        self.last = Holder(self.me, self.token, self.lease_s)
        log.warning("lease taken: this controller is the primary", me=self.me, token=self.token)
        return True

    def renew(self) -> bool:
        """Extend the lease; False if another controller holds it now (deposed)."""
        params = {"key": KEY, "me": self.me, "lease": self.lease_s, "token": self.token}
        with self.engine.begin() as conn:
            token = conn.execute(sa.text(_RENEW), params).scalar()
        return token is not None

    def release(self) -> None:
        """A clean stop: let a standby take over at once instead of after the lease."""
        if not self.token:
            return
        with self.engine.begin() as conn:
            conn.execute(sa.text(_RELEASE), {"key": KEY, "token": self.token})
        self.token = 0

    def check(self, conn: Connection) -> None:
        """The fence, first in every store transaction: NotPrimary unless the lease's
        token is still ours. The shared lock is held until the transaction ends, so a
        takeover (which takes it exclusively) cannot slip in between this check and the
        commit."""
        # a primary that vanishes mid-transaction (its host gone, no TCP reset) must not
        # hold the row's lock past its lease: the server ends such a session then
        conn.execute(sa.text(_FENCE_LOCK), {"idle_ms": str(int(self.lease_s * 1000))})
        token = conn.execute(sa.text(_FENCE), {"key": KEY}).scalar()
        if token != self.token or not self.token:
            why = (
                f"this controller ({self.me}) lost the lease: its fencing token is "
                f"{self.token}, the store's is {token}; another controller is primary"
            )
            self.on_lost(why)
            raise NotPrimary(why)


async def keep(lease: Lease, lost: Callable[[str], None]) -> None:
    """Renew every third of the lease until it is lost: another controller took it, or
    the database did not answer for a whole lease (a standby may hold it by then)."""
    interval = lease.lease_s / 3
    renewed = time.monotonic()  # taken just now
    while True:
        await asyncio.sleep(interval)
        started = time.monotonic()
        try:
            held = await asyncio.to_thread(lease.renew)
        except (sa.exc.SQLAlchemyError, StoreUnavailable) as exc:
            silent = time.monotonic() - renewed
            log.error("lease not renewed", error=str(exc).splitlines()[0], silent_s=silent)
            if silent >= lease.lease_s:
                lost(f"the lease was not renewed for {silent:.1f} s (the store did not answer)")
                return
            continue
        if not held:
            lost("another controller took the lease")
            return
        renewed = started
