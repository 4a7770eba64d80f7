"""The command path's hand-written parsers agree with the regular expressions they
replaced (kept here as the reference): the commands stopped importing ``re``
(tests/unit/test_import_budget.py), and must not have changed what they accept."""

from __future__ import annotations

import re
import shlex
import signal
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import jobopts, scancel
from corral import hostlist, jobsyntax, patterns, signals, slurmfmt
from corral.errors import CorralError

FUZZ = settings(max_examples=400, deadline=500, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(
    alphabet=st.sampled_from(string.digits + "-:.+_,?%[]TtMmGgKkBbsjxnN aéz\n\u0661"),
    max_size=12,
)


def _outcome(parse: object, text: str) -> object:
    try:
        return parse(text)  # type: ignore[operator]
    except CorralError:
        return "refused"


@FUZZ
@given(TEXT)
def test_duration_is_slurms_pattern(text: str) -> None:
    s = text.strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    got = _outcome(slurmfmt.parse_duration, text)
    if s.lower() in ("-1", "infinite", "unlimited"):
        assert got == slurmfmt.UNLIMITED
    elif not m:
        assert got == "refused"
    elif got != "refused":  # else too large: refused on the value, not the form
        days, *rest = m.groups()
        nums = [int(x) for x in rest if x is not None]
        h, mi, sec = (
            ([*nums, 0, 0][:3])
            if days is not None
            else [0, nums[0], 0]
            if len(nums) == 1
            else [0, *nums]
            if len(nums) == 2
            else nums
        )
        assert got == ((int(days or 0) * 24 + h) * 60 + mi) * 60 + sec


@FUZZ
@given(TEXT)
def test_size_is_slurms_pattern(text: str) -> None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt]?)[Bb]?", text.strip())
    got = _outcome(slurmfmt.parse_size_mb, text)
    if not m:
        assert got == "refused"
    elif got != "refused":
        units = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
        value = float(m.group(1)) * units[m.group(2).upper()]
        assert got == (int(value) if value == int(value) else int(value) + 1)


@FUZZ
@given(TEXT)
def test_clock_and_date_times_are_slurms_patterns(text: str) -> None:
    now = 1_700_000_000.0
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", text.strip())
    date = re.fullmatch(
        r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{1,2}):(\d{2})(?::(\d{2}))?)?", text.strip()
    )
    rel = re.fullmatch(
        r"now\+(\d+)(seconds?|minutes?|hours?|days?|weeks?)?", text.strip(), re.IGNORECASE
    )
    got = _outcome(lambda t: slurmfmt.parse_timestamp(t, now=now), text)
    words = ("now", "today", "midnight", "noon", "teatime", "tomorrow")
    if not (clock or date or rel) and text.strip().lower() not in words:
        assert got == "refused"
    if rel:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
        assert got == now + int(rel.group(1)) * unit[(rel.group(2) or "s")[0].lower()]
    if clock:
        hour, minute, second = (int(g or 0) for g in clock.groups())
        if hour < 24 and minute < 60 and second < 60:
            assert isinstance(got, float) and 0 < got - now <= 86400
        else:  # '45:74' has a clock's shape but is no time of day
            assert got == "refused"


@FUZZ
@given(TEXT)
def test_array_and_dependency_are_slurms_patterns(text: str) -> None:
    body = text.strip().partition("%")[0]
    items = [re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", i.strip()) for i in body.split(",")]
    if not all(items):
        assert _outcome(jobsyntax.parse_array, text) == "refused"
    for ref in text.replace("?", ",").split(","):
        for job_id in ref.partition(":")[2].split(":"):
            if job_id:
                got = _outcome(jobsyntax.parse_dependency, f"afterok:{job_id}")
                # the parser strips the whole value: the last id's trailing blanks go
                ok = re.fullmatch(r"\d+(_\d+)?(\+\d+)?", job_id.rstrip()) is not None
                assert (got != "refused") == ok


@FUZZ
@given(TEXT)
def test_gpu_node_and_variable_syntax_are_the_patterns(text: str) -> None:
    m = re.fullmatch(r"(?:([A-Za-z0-9_.\-]+):)?(\d+)", text.strip())
    got = _outcome(lambda t: jobopts.parse_gpus(t, "--gpus"), text)
    assert got == ((m.group(1) or "", int(m.group(2))) if m else "refused")
    n = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    nodes = _outcome(jobopts.parse_nodes, text)
    if not n or int(n.group(1)) < 1:
        assert nodes == "refused"
    if "," not in text and text.upper() not in ("", "ALL", "NONE"):  # one variable
        name = text.partition("=")[0]
        ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
        got_env = _outcome(lambda t: jobopts.export_environment(t, {}), text)
        assert (got_env != "refused") == ok


@FUZZ
@given(TEXT)
def test_output_patterns_expand_as_the_pattern(text: str) -> None:
    values = {"j": "42", "x": "nm", "u": "me", "N": "n1", "A": "42", "a": "0", "%": "%"}
    values.update({"J": "42", "n": "0", "t": "0", "s": "batch"})

    def sub(m: re.Match[str]) -> str:
        width, key = m.group(1), m.group(2)
        if key not in values:
            return m.group(0)
        value = values[key]
        return value.zfill(min(int(width), 10)) if width and value.isdecimal() else value

    expected = re.sub(r"%(\d*)([A-Za-z%])", sub, text)
    got = patterns.expand_pattern(text, job_id=42, job_name="nm", user="me", node="n1")
    assert got == expected


@FUZZ
@given(st.lists(TEXT, max_size=4))
def test_hostlist_numeric_tails_are_the_pattern(names: list[str]) -> None:
    for name in names:
        m = re.match(r"^(.*?)([0-9]+)$", name)
        tail = hostlist._numeric_tail(name)
        assert tail == (m.groups() if m else None)
        pieces = re.split(r"(\[[^\]]*\])", name)
        assert hostlist._bracketed(name) == pieces


@FUZZ
@given(st.lists(st.text(max_size=8), max_size=5))
def test_submit_line_is_shlex_join(words: list[str]) -> None:
    assert jobopts.submit_line(words) == shlex.join(words)


@pytest.mark.parametrize(
    "name", [*signal.Signals.__members__, "SIG", "SIG_IGN", "SIGFOO", "KILL", "sigkill"]
)
def test_signal_names_are_the_signal_modules(name: str) -> None:
    expected = int(signal.Signals[name]) if name in signal.Signals.__members__ else None
    assert signals.number(name) == expected
    if expected is not None:
        assert scancel.parse_signal(name) == expected
        assert jobsyntax.signal_number(name.removeprefix("SIG")) == expected
