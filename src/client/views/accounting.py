"""Reservations, fair-share rows (GetShares), usage records and the account tree
(ReportUsage), and one job's outcome of a write (``Outcome``: cancel, hold, update)."""

from __future__ import annotations

from client.views.values import as_float, as_int, as_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class Reservation:
    """A Reservation of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Reservation) -> None:
        self.raw = raw

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def start_time(self) -> float:
        return as_float(self.raw.get("startTime"))

    @property
    def end_time(self) -> float:
        return as_float(self.raw.get("endTime"))

    @property
    def nodes(self) -> str:
        return as_str(self.raw.get("nodes"))

    @property
    def node_count(self) -> int:
        return as_int(self.raw.get("nodeCount"))

    @property
    def users(self) -> list[str]:
        return list(self.raw.get("users") or ())

    @property
    def accounts(self) -> list[str]:
        return list(self.raw.get("accounts") or ())

    @property
    def flags(self) -> list[str]:
        return list(self.raw.get("flags") or ())

    @property
    def partition(self) -> str:
        return as_str(self.raw.get("partition"))


class ShareRow:
    """A ShareRow of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.ShareRow) -> None:
        self.raw = raw

    @property
    def account(self) -> str:
        return as_str(self.raw.get("account"))

    @property
    def user(self) -> str:
        return as_str(self.raw.get("user"))

    @property
    def depth(self) -> int:
        return as_int(self.raw.get("depth"))

    @property
    def raw_shares(self) -> int:
        return as_int(self.raw.get("rawShares"))

    @property
    def norm_shares(self) -> float:
        return as_float(self.raw.get("normShares"))

    @property
    def raw_usage(self) -> float:
        return as_float(self.raw.get("rawUsage"))

    @property
    def norm_usage(self) -> float:
        return as_float(self.raw.get("normUsage"))

    @property
    def effective_usage(self) -> float:
        return as_float(self.raw.get("effectiveUsage"))

    @property
    def fairshare(self) -> float:
        return as_float(self.raw.get("fairshare"))


class UsageRecord:
    """A UsageRecord of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.UsageRecord) -> None:
        self.raw = raw

    @property
    def account(self) -> str:
        return as_str(self.raw.get("account"))

    @property
    def user(self) -> str:
        return as_str(self.raw.get("user"))

    @property
    def bucket(self) -> int:
        return as_int(self.raw.get("bucket"))

    @property
    def tres_s(self) -> dict[str, float]:
        return dict(self.raw.get("tresS") or {})


class AccountParent:
    """An account and its parent in the account tree (ReportUsage)."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.AccountParent) -> None:
        self.raw = raw

    @property
    def account(self) -> str:
        return as_str(self.raw.get("account"))

    @property
    def parent(self) -> str:
        return as_str(self.raw.get("parent"))


class Outcome:
    """A CancelOutcome of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.CancelOutcome) -> None:
        self.raw = raw

    @property
    def job_id(self) -> str:
        """The job as ctld (or, for an id that named none, the caller) named it."""
        value = self.raw.get("jobId")
        return "" if value is None else str(value)

    @property
    def ok(self) -> bool:
        return bool(self.raw.get("ok"))

    @property
    def message(self) -> str:
        return as_str(self.raw.get("message"))
