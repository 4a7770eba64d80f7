"""Reservations, fair-share rows (GetShares), usage records and the account tree
(ReportUsage), and one job's outcome of a write (``Outcome``: cancel, hold, update)."""

from __future__ import annotations

from corral.wire.views import (
    AccountParentFields,
    CancelOutcomeFields,
    ReservationFields,
    ShareRowFields,
    UsageRecordFields,
)


class Reservation(ReservationFields):
    """A Reservation of a reply, read through typed properties."""

    __slots__ = ()


class ShareRow(ShareRowFields):
    """A ShareRow of a reply, read through typed properties."""

    __slots__ = ()


class UsageRecord(UsageRecordFields):
    """A UsageRecord of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def tres_s(self) -> dict[str, float]:
        return dict(self.raw.get("tresS") or {})


class AccountParent(AccountParentFields):
    """An account and its parent in the account tree (ReportUsage)."""

    __slots__ = ()


class Outcome(CancelOutcomeFields):
    """A CancelOutcome of a reply, read through typed properties."""

    __slots__ = ()

    @property
    def job_ref(self) -> str:
        """The job as ctld (or, for an id that named none, the caller) named it: a
        string, where the generated ``job_id`` reads a number."""
        value = self.raw.get("jobId")
        return "" if value is None else str(value)
