"""Slurm's -o format strings and sacct field lists, as the query commands parse and print them."""

from __future__ import annotations

from typing import Any

import pytest

from client.acctfields import (
    DATE,
    NUM,
    STR,
    AcctField,
    acct_lines,
    parse_acct_fields,
)
from client.fmt import (
    Column,
    Reported,
    Spec,
    all_letters,
    call,
    check_format,
    convert_mb,
    justify,
    parse_format,
    parse_job_ids,
    parse_states,
    render,
    render_rows,
    split_list,
    squeue_secs,
    wire_states,
)
from corral.api import Controller
from corral.errors import ControllerUnavailable, InvalidNodeName, InvalidOption


def test_parse_format_reads_width_justification_and_literal_text() -> None:
    prefix, specs = parse_format("JOB%.18i %-x%5j|%T")
    assert prefix == "JOB"
    assert specs == [
        Spec("i", 18, True, " "),
        Spec("-", 0, False, "x"),
        Spec("j", 5, False, "|"),
        Spec("T", 0, False, ""),
    ]


def test_parse_format_skips_empty_pieces_like_strtok() -> None:
    assert parse_format("%%i") == ("", [Spec("i")])


def test_parse_format_refuses_a_spec_without_letter() -> None:
    with pytest.raises(InvalidOption):
        parse_format("%i %.18")


@pytest.mark.parametrize(
    ("value", "width", "right", "cut", "out"),
    [
        ("PENDING", 3, True, True, "PEN"),  # %.3T
        ("PENDING", 3, False, True, "PEN"),  # %3T
        ("R", 5, False, True, "R    "),
        ("R", 5, True, True, "    R"),
        ("1-02:04:00", 9, True, False, "1-02:04:00"),  # durations are never cut
        ("1-02:04:00", 9, False, False, "1-02:04:0"),  # ... unless left-justified
        ("anything", 0, True, True, "anything"),
    ],
)
def test_justify_pads_and_cuts_as_slurm(
    value: str, width: int, right: bool, cut: bool, out: str
) -> None:
    assert justify(value, width, right, cut) == out


def test_render_header_and_rows_with_prefix_and_suffixes() -> None:
    columns = {
        "i": Column("JOBID", lambda r: str(r), cut=False),
        "j": Column("NAME", lambda r: "x" * r),
    }
    prefix, specs = parse_format(">%.4i|%3j<")
    assert render(prefix, specs, columns, None) == ">JOBI|NAM<"
    assert render(prefix, specs, columns, 12345) == ">12345|xxx<"
    assert render(prefix, specs, columns, 2) == ">   2|xx <"


def test_check_format_names_the_bad_letter() -> None:
    _, specs = parse_format("%i %q")
    with pytest.raises(InvalidOption, match="Invalid job format specification: q"):
        check_format(specs, {"i": Column("JOBID", str)}, "job")


def test_all_letters_lists_lower_then_upper_case() -> None:
    assert all_letters(["Z", "a", "i", "A"]) == "%a|%i|%A|%Z"
    assert all_letters(["a", "B"], upper_suffix=" ") == "%a|%B "


@pytest.mark.parametrize(
    ("mb", "text"),
    [
        (0, "0"),
        (500, "500M"),
        (2048, "2G"),
        (1536, "1.50G"),
        (2560, "2.50G"),
        (1500, "1500M"),
        (23081, "23081M"),
        (65536, "64G"),
        (1024 * 1024, "1T"),
    ],
)
def test_convert_mb_keeps_the_value_exact(mb: int, text: str) -> None:
    assert convert_mb(mb) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0:00"),
        (65, "1:05"),
        (3600, "1:00:00"),
        (90061, "1-01:01:01"),
        (365 * 86400, "365-00:00:00"),
        (365 * 86400 + 1, "INVALID"),
        (-1, "INVALID"),
    ],
)
def test_squeue_secs(seconds: int, text: str) -> None:
    assert squeue_secs(seconds) == text


def test_state_lists_take_names_codes_and_all() -> None:
    assert parse_states("pd,R") == {"PENDING", "RUNNING"}
    assert parse_states("completed cancelled") == {"COMPLETED", "CANCELLED"}
    assert parse_states("PD,all") is None
    assert parse_states("CF,S") == {"CONFIGURING", "SUSPENDED"}
    with pytest.raises(InvalidOption, match="Invalid job state specified: bogus"):
        parse_states("R,bogus")


def test_wire_states_drops_states_the_contract_lacks() -> None:
    assert wire_states({"RUNNING", "SUSPENDED", "CONFIGURING"}) == ["JOB_STATE_RUNNING"]


def test_job_ids_take_steps_and_array_tasks_as_their_job() -> None:
    assert parse_job_ids("5,6.batch 7_1") == ["5", "6", "7"]
    assert parse_job_ids(["8", "9,10"]) == ["8", "9", "10"]
    with pytest.raises(InvalidOption, match="Invalid job id: abc"):
        parse_job_ids("5,abc")


def test_split_list() -> None:
    assert split_list("a,b c,,") == ["a", "b", "c"]


# ---------------------------------------------------------------- sacct


def test_acct_fields_match_names_as_prefixes_case_insensitively() -> None:
    fields = parse_acct_fields("jobid,JOBNAME%30,state,node,elapsedraw,jobidraw%-5")
    assert [(f.name, f.width) for f in fields] == [
        ("JobID", -12),
        ("JobName", 30),
        ("State", 10),
        ("NodeList", 15),
        ("ElapsedRaw", 10),
        ("JobIDRaw", -5),
    ]


def test_acct_fields_all_and_bad_names() -> None:
    assert len(parse_acct_fields("ALL")) > 100
    with pytest.raises(InvalidOption, match='Invalid field requested: "bogus"'):
        parse_acct_fields("JobID,bogus")


def test_acct_default_header_is_slurms() -> None:
    fields = parse_acct_fields("jobid,jobname,partition,account,alloccpus,state,exitcode")
    head, dashes = acct_lines(fields, [])
    assert head == "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode "
    assert dashes == "------------ ---------- ---------- ---------- ---------- ---------- -------- "


def test_acct_cells_cut_text_with_a_plus_but_never_numbers_or_durations() -> None:
    assert AcctField("State", 10, "s").cell("CANCELLED by 0") == "CANCELLED+"
    assert AcctField("JobID", -12, "s").cell("5.batch") == "5.batch     "
    assert AcctField("JobID", 20, "s").cell("5") == " " * 19 + "5"
    assert AcctField("NCPUS", 3, "n").cell("12345") == "12345"
    assert AcctField("Elapsed", 3, "t").cell("00:02:00") == "00:02:00"
    assert AcctField("Start", 10, "d").cell("2026-12-02T12:00:00") == "2026-12-02"
    assert AcctField("Elapsed", 3, "t").header() == "Ela"


def test_acct_parsable_forms() -> None:
    fields = parse_acct_fields("JobID,State")
    rows = [["1", "COMPLETED"], ["1.batch", "COMPLETED"]]
    assert acct_lines(fields, rows, parsable="P") == [
        "JobID|State",
        "1|COMPLETED",
        "1.batch|COMPLETED",
    ]
    assert acct_lines(fields, rows, parsable="p", header=False) == [
        "1|COMPLETED|",
        "1.batch|COMPLETED|",
    ]
    assert acct_lines(fields, rows[:1], parsable="P", delimiter=",") == [
        "JobID,State",
        "1,COMPLETED",
    ]


class _FailingClient(Controller):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def call(self, method: str, request: Any) -> Any:
        raise self.error


def test_call_words_failures_as_slurm() -> None:
    api = _FailingClient(ControllerUnavailable())
    with pytest.raises(Reported) as info:
        call(lambda: api.get_jobs({}), "slurm_load_jobs error")
    assert info.value.message == (
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    )
    api = _FailingClient(InvalidNodeName("Invalid node name specified: x"))
    with pytest.raises(InvalidNodeName):
        call(lambda: api.get_nodes({}), "slurm_load_node error", keep=(InvalidNodeName,))


def test_limits_show_in_whole_minutes_rounded_up_and_gpu_tres_as_22_05() -> None:
    from client.fmt import gpu_tres, limit_minutes
    from client.sacct import timelimit
    from client.squeue import time_limit

    assert [limit_minutes(s) for s in (1, 60, 61, 3600)] == [60, 60, 120, 3600]
    assert time_limit({"timeLimitS": "30"}) == "1:00"
    assert timelimit({"timeLimitS": "90"}) == "00:02:00"
    assert timelimit({"timeLimitS": "90"}, raw=True) == "2"
    assert (gpu_tres(2), gpu_tres(1, "h100")) == ("gres:gpu:2", "gres:gpu:h100:1")


@pytest.mark.parametrize(
    "fmt",
    [
        "%.5a %5b|%c",
        "{x} %a}{%.3b %4c %0a",
        "%10a%.10b%10c",
        "%a",
        "",
    ],
)
def test_rows_render_as_each_line_alone(fmt: str) -> None:
    # squeue makes 100,000 lines with one str.format template: each must be what the
    # one-line render gives (cut or not, left or right, braces in the literal text)
    columns = {
        "a": Column("AAAA", lambda item: item[0]),
        "b": Column("BB", lambda item: item[1], cut=False),
        "c": Column("C", lambda item: item[2]),
    }
    prefix, specs = parse_format(fmt)
    items = [("", "", ""), ("x", "yy", "z"), ("a-long-value", "another-long-one", "{}")]
    assert render_rows(prefix, specs, columns, items) == [
        render(prefix, specs, columns, item) for item in items
    ]


def test_acct_lines_print_each_cell_as_the_field_says() -> None:
    # sacct's fixed columns are one template down 100,000 rows: each line must be the
    # fields' cells (text cut and marked +, dates cut, numbers never cut) side by side
    fields = [
        AcctField("Name", 5, STR),
        AcctField("Left", -4, STR),
        AcctField("When", 4, DATE),
        AcctField("N", 2, NUM),
        AcctField("Zero", 0, STR),
        AcctField("Whole", 0, NUM),
    ]
    rows = [
        ["", "", "", "", "", ""],
        ["abc", "ab", "2026", "7", "x", "1"],
        ["abcdefgh", "abcdef", "2026-12-06", "12345", "long", "99999"],
        ["{}", "{0}", "}{", "{", "}", "{x}"],
    ]
    expected = ["".join(f.cell(v) + " " for f, v in zip(fields, row, strict=True)) for row in rows]
    assert acct_lines(fields, rows, header=False) == expected
    with pytest.raises(ValueError):
        acct_lines(fields, [["too", "few"]], header=False)
