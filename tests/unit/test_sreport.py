"""sreport's layouts from ReportUsage replies (proto3 JSON), as Slurm 22.05 prints them:
the banner, the columns, Slurm's widths (an amount column sized for its largest
value), the account tree's sums, -T, -t, format=, -P/-p/-n."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.sreport import (
    amount,
    amount_width,
    format_report,
    parse_argv,
    parse_conditions,
    pick_report,
    report_fields,
    report_window,
    time_format,
    tres_list,
)
from corral.errors import InvalidOption

START = 1796083200.0  # 2026-12-01T00:00:00Z
DAY = 86400.0
REPLY: dict[str, Any] = {
    "cluster": "lab",
    "now": START + 90000,
    "capacity": {"cpu": 32, "gres/gpu": 16, "mem": 131072, "node": 2, "billing": 32},
    "accounts": [
        {"account": "root"},
        {"account": "physics", "parent": "root"},
        {"account": "bio", "parent": "root"},
        {"account": "theory", "parent": "physics"},
        {"account": "idle", "parent": "root"},  # nobody charged it: not listed
    ],
    "records": [
        {"account": "physics", "user": "alice9x", "tresS": {"cpu": 28800, "gres/gpu": 7200}},
        {"account": "physics", "user": "bob9x", "tresS": {"cpu": 7200}},
        {"account": "theory", "user": "bob9x", "tresS": {"cpu": 1800, "gres/gpu": 1800}},
        {"account": "bio", "user": "carol9x", "tresS": {"cpu": 3600, "gres/gpu": 3600}},
    ],
}
BANNER = "-" * 80


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def report(name: str, words: list[str] | None = None, **kw: Any) -> str:
    return format_report(
        REPLY, name, parse_conditions(name, words or []), start=START, end=START + DAY, **kw
    )


def test_account_utilization_by_user_default() -> None:
    assert report("AccountUtilizationByUser") == (
        f"{BANNER}\n"
        "Cluster/Account/User Utilization 2026-12-01T00:00:00 - 2026-12-01T23:59:59 "
        "(86400 secs)\n"
        "Usage reported in CPU Minutes\n"
        f"{BANNER}\n"
        "  Cluster         Account     Login     Proper Name     Used   Energy \n"
        "--------- --------------- --------- --------------- -------- -------- \n"
        "      lab            root                                690        0 \n"
        "      lab             bio                                 60        0 \n"
        "      lab             bio   carol9x                       60        0 \n"
        "      lab         physics                                630        0 \n"
        "      lab         physics   alice9x                      480        0 \n"
        "      lab         physics     bob9x                      120        0 \n"
        "      lab          theory                                 30        0 \n"
        "      lab          theory     bob9x                       30        0 \n"
    )


def test_gpu_hours_parsable() -> None:
    out = report(
        "AccountUtilizationByUser",
        tres=["gres/gpu"],
        tres_given=True,
        time_fmt="hours",
        parsable="P",
    )
    assert out.splitlines()[2] == "Usage reported in TRES Hours"
    assert out.splitlines()[4:] == [
        "Cluster|Account|Login|Proper Name|TRES Name|Used",
        "lab|root|||gres/gpu|4",
        "lab|bio|||gres/gpu|1",
        "lab|bio|carol9x||gres/gpu|1",
        "lab|physics|||gres/gpu|2",
        "lab|physics|alice9x||gres/gpu|2",
        "lab|physics|bob9x||gres/gpu|0",
        "lab|theory|||gres/gpu|0",
        "lab|theory|bob9x||gres/gpu|0",
    ]


def test_accounts_format_widths_and_hourper() -> None:
    # Slurm's own example: format=account%8,login%23,used%10 -t hourper; Used keeps its
    # computed width (17: 8 + 9 for the percentage), as Slurm sizes it after format=
    out = report(
        "AccountUtilizationByUser",
        ["accounts=physics", "format=account%8,login%23,used%10"],
        time_fmt="hourper",
    )
    assert out.splitlines()[2] == "Usage reported in CPU Hours/Percentage of Total"
    assert out.splitlines()[4:] == [
        " Account                   Login              Used ",
        "-------- ----------------------- ----------------- ",
        " physics                                 10(1.37%) ",
        " physics                 alice9x          8(1.04%) ",
        " physics                   bob9x          2(0.26%) ",
        "  theory                                  0(0.07%) ",
        "  theory                   bob9x          0(0.07%) ",
    ]


def test_top_usage_two_tres_top_count() -> None:
    out = report("TopUsage", ["TopCount=2"], tres=["gres/gpu", "cpu"], tres_given=True)
    assert out.splitlines()[1] == (
        "Top 2 Users 2026-12-01T00:00:00 - 2026-12-01T23:59:59 (86400 secs)"
    )
    assert out.splitlines()[2] == "Usage reported in TRES Minutes"
    assert out.splitlines()[4:] == [
        "  Cluster     Login     Proper Name         Account      TRES Name     Used ",
        "--------- --------- --------------- --------------- -------------- -------- ",
        "      lab   alice9x                         physics       gres/gpu      120 ",
        "      lab   alice9x                         physics            cpu      480 ",
        "      lab   carol9x                             bio       gres/gpu       60 ",
        "      lab   carol9x                             bio            cpu       60 ",
    ]


def test_top_usage_grouped_no_header() -> None:
    assert report("TopUsage", ["group"], header=False) == (
        "      lab   alice9x                         physics      480        0 \n"
        "      lab     bob9x                 physics, theory      150        0 \n"
        "      lab   carol9x                             bio       60        0 \n"
    )


def test_cluster_utilization() -> None:
    out = report("Utilization")
    assert out.splitlines()[1] == "Cluster Utilization 2026-12-01T00:00:00 - 2026-12-01T23:59:59"
    assert out.splitlines()[4:] == [
        "  Cluster Allocate     Down PLND Dow     Idle Reserved Reported ",
        "--------- -------- -------- -------- -------- -------- -------- ",
        "      lab      690        0        0    45390        0    46080 ",
    ]
    out = report(
        "Utilization", tres=["cpu", "gres/gpu"], tres_given=True, time_fmt="percent", parsable="p"
    )
    assert out.splitlines()[2] == "Usage reported in Percentage of Total"
    assert out.splitlines()[4:] == [
        "Cluster|TRES Name|Allocated|Down|PLND Down|Idle|Reserved|Reported|",
        "lab|cpu|1.50%|0.00%|0.00%|98.50%|0.00%|100.00%|",
        "lab|gres/gpu|0.91%|0.00%|0.00%|99.09%|0.00%|100.00%|",
    ]


def test_user_utilization_by_account() -> None:
    assert report("UserUtilizationByAccount", header=False).splitlines() == [
        "      lab   alice9x                         physics      480        0 ",
        "      lab     bob9x                         physics      120        0 ",
        "      lab   carol9x                             bio       60        0 ",
        "      lab     bob9x                          theory       30        0 ",
    ]


def test_amounts_and_widths() -> None:
    assert [amount(5400, 86400, f) for f in ("Seconds", "Minutes", "Hours", "Percent")] == [
        "5400",
        "90",
        "2",
        "6.25%",
    ]
    assert amount(5400, 86400, "MinPer") == "90(6.25%)"
    assert amount_width(0, "Minutes") == 8
    assert amount_width(10**8, "Minutes") == 9
    assert amount_width(555_000_000, "HourPer") == 18  # Slurm's example: 154251(63.71%)


def test_options_anywhere_and_words() -> None:
    opts, words = parse_argv(
        [
            "cluster",
            "AccountUtilizationByUser",
            "-t",
            "hours",
            "-T",
            "gres/gpu",
            "start=now-1week",
            "-P",
        ]
    )
    assert words == ["cluster", "AccountUtilizationByUser", "start=now-1week"]
    assert opts["time"] == "hours" and opts["tres"] == "gres/gpu" and opts["parsable2"]
    assert pick_report(["clus", "acc", "users=a"]) == ("AccountUtilizationByUser", ["users=a"])
    assert pick_report(["user", "top"]) == ("TopUsage", [])
    cond = parse_conditions("TopUsage", ["TopCount=3", "Users=a,b", "Accounts=x", "group"])
    assert cond["top"] == 3 and cond["users"] == ["a", "b"] and cond["accounts"] == ["x"]
    assert cond["group"] is True


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pick_report(["cluster", "Nonsense"]), "Not valid report Nonsense"),
        (lambda: pick_report(["jobs", "SizesByAccount"]), "invalid keyword: jobs"),
        (lambda: pick_report([]), "no report asked for"),
        (lambda: parse_conditions("TopUsage", ["color=red"]), "Unknown condition: color=red"),
        (lambda: parse_conditions("TopUsage", ["TopCount=x"]), "Invalid value for TopCount"),
        (lambda: report_fields("TopUsage", ["Nope"], False), "Unknown field 'Nope'"),
        (lambda: time_format("fortnights"), "unknown time format fortnights"),
        (lambda: tres_list("gres/fpga"), "invalid TRES gres/fpga"),
    ],
)
def test_bad_input_is_named(call: Any, message: str) -> None:
    with pytest.raises(InvalidOption, match=message):
        call()


def test_tres_names() -> None:
    assert tres_list(None) == ["cpu"]
    assert tres_list("GRES/gpu,cpu") == ["gres/gpu", "cpu"]
    assert tres_list("gres/gpu:a100") == ["gres/gpu"]
    assert tres_list("ALL") == ["cpu", "gres/gpu", "mem", "node", "billing"]


def test_window_as_slurm_rounds_it() -> None:
    now = START + 10 * 3600 + 40 * 60  # 10:40
    # default: yesterday, midnight to midnight
    assert report_window(None, None, now) == (START - DAY, START)
    # to the nearest hour; an end after now is now
    assert report_window("now-2hours", "now+5hours", now) == (START + 9 * 3600, START + 11 * 3600)
    assert report_window("2026-11-30", "2026-12-01T06:20:00", now) == (
        START - DAY,
        START + 6 * 3600,
    )
    # at least an hour
    assert report_window("now", "now", now) == (START + 11 * 3600, START + 12 * 3600)
