"""scontrol's advance-reservation commands: create, update, delete and show.

    scontrol create reservation ReservationName=maint StartTime=now Duration=2:00:00 \\
        Nodes=node[01-02] Users=root Flags=MAINT
    scontrol update ReservationName=maint EndTime=2026-12-03T08:00:00
    scontrol delete ReservationName=maint
    scontrol show reservation [NAME]

Keys and output as Slurm's (``Reservation created: NAME``, the ``show`` record).
"""

from __future__ import annotations

import time

from client.common import client
from client.fmt import Reported, call, split_list
from client.views.accounting import Reservation
from corral import hostlist
from corral.errors import CorralError, InvalidOption
from corral.slurmfmt import (
    UNLIMITED,
    format_elapsed,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

TEN_YEARS_S = 10 * 365 * 86400


def _pairs(words: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise Reported(f"Invalid input: {word}\nRequest aborted")
        out[key.lower().rstrip("s") if key.lower() in ("users", "accounts") else key.lower()] = (
            value
        )
    return out


def _time(value: str, what: str) -> float:
    try:
        if value.lower() == "now":
            return time.time()
        return parse_timestamp(value, now=time.time(), what=what)
    except CorralError as exc:
        raise Reported(f"Invalid {what} {value!r}: {exc.message}") from None


def _duration(value: str) -> int:
    try:
        seconds = parse_duration(value, what="duration")
    except CorralError as exc:
        raise Reported(f"Invalid duration {value!r}: {exc.message}") from None
    return TEN_YEARS_S if seconds == UNLIMITED else seconds


def reservation_from(words: Sequence[str]) -> t.Reservation:
    p = _pairs(words)
    resv: t.Reservation = {}
    known = {
        "reservationname",
        "starttime",
        "endtime",
        "duration",
        "nodes",
        "nodecnt",
        "user",
        "account",
        "flags",
        "partitionname",
    }
    for key in p:
        if key not in known:
            raise Reported(f"Invalid input: {key}\nRequest aborted")
    if "reservationname" in p:
        resv["name"] = p["reservationname"]
    if "starttime" in p:
        resv["startTime"] = _time(p["starttime"], "StartTime")
    if "endtime" in p:
        resv["endTime"] = _time(p["endtime"], "EndTime")
    if "duration" in p:
        resv["durationS"] = str(_duration(p["duration"]))
    if "nodes" in p:
        resv["nodes"] = p["nodes"]
    if "nodecnt" in p:
        if not p["nodecnt"].isdigit() or int(p["nodecnt"]) < 1:
            raise Reported(f"Invalid node count {p['nodecnt']!r}")
        resv["nodeCount"] = int(p["nodecnt"])
    if "user" in p:
        resv["users"] = split_list(p["user"])
    if "account" in p:
        resv["accounts"] = split_list(p["account"])
    if "flags" in p:
        resv["flags"] = [f.upper() for f in split_list(p["flags"])]
    if "partitionname" in p:
        resv["partition"] = p["partitionname"]
    return resv


def create(words: Sequence[str]) -> str:
    if words and words[0].lower().startswith("res"):
        words = words[1:]
    resv = reservation_from(words)
    reply = call(
        lambda: client().create_reservation({"reservation": resv}), "Error creating the reservation"
    )
    return f"Reservation created: {reply.get('name', '')}\n"


def update(words: Sequence[str]) -> None:
    resv = reservation_from(words)
    if "name" not in resv:
        raise Reported("Reservation name missing\nRequest aborted")
    request: t.UpdateReservationRequest = {"name": resv.pop("name")}
    if "startTime" in resv:
        request["startTime"] = resv.pop("startTime")
    if "endTime" in resv:
        request["endTime"] = resv.pop("endTime")
    if "durationS" in resv:
        request["durationS"] = resv.pop("durationS")
    if "nodes" in resv:
        request["nodes"] = resv.pop("nodes")
    if "users" in resv:
        request["users"] = resv.pop("users")
    if "accounts" in resv:
        request["accounts"] = resv.pop("accounts")
    if "flags" in resv:
        request["flags"] = resv.pop("flags")
    if resv:
        raise Reported(f"Update of {sorted(resv)[0]} is not supported\nRequest aborted")
    call(lambda: client().update_reservation(request), "Error updating the reservation")


def delete(words: Sequence[str]) -> None:
    p = _pairs(words) if words and "=" in words[0] else {}
    name = p.get("reservationname") or (words[1] if len(words) > 1 else "")
    if not name:
        raise Reported("invalid delete request: give ReservationName=NAME")
    call(lambda: client().delete_reservation({"name": name}), "Error deleting the reservation")


def record_lines(resv: Reservation, now: float) -> list[str]:
    start, end = resv.start_time, resv.end_time
    nodes = resv.nodes
    state = "ACTIVE" if start <= now < end else "INACTIVE"
    flags = ",".join(resv.flags) or "(null)"
    return [
        f"ReservationName={resv.name} StartTime={format_timestamp(start)} "
        f"EndTime={format_timestamp(end)} Duration={format_elapsed(end - start)}",
        f"Nodes={nodes} NodeCnt={resv.node_count or len(hostlist.expand(nodes))} "
        f"CoreCnt=0 Features=(null) PartitionName={resv.partition or '(null)'} "
        f"Flags={flags}",
        "TRES=(null)",
        f"Users={','.join(resv.users) or '(null)'} Groups=(null) "
        f"Accounts={','.join(resv.accounts) or '(null)'} Licenses=(null) "
        f"State={state} BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]


def format_reservations(reply: t.GetReservationsResponse, one_liner: bool = False) -> str:
    now = float(reply.get("now") or 0)
    items = [Reservation(r) for r in reply.get("reservations") or []]
    if not items:
        return "No reservations in the system\n"
    sep = " " if one_liner else "\n   "
    end = "\n" if one_liner else "\n\n"
    return "".join(sep.join(record_lines(r, now)) + end for r in items)


def show(name: str, one_liner: bool) -> str:
    request: t.GetReservationsRequest = {"names": [name]} if name else {}
    try:
        reply = call(lambda: client().get_reservations(request), "slurm_load_reservations error")
    except Reported:
        if name:
            raise Reported(f"Reservation {name} not found") from None
        raise
    return format_reservations(reply, one_liner)


__all__ = ["InvalidOption", "create", "delete", "format_reservations", "show", "update"]
