"""Fuzzed parsers: any text is a value or a CorralError (a clear refusal), never a crash
or a hang. Hypothesis generates the inputs; each example has a deadline."""

from __future__ import annotations

import contextlib
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import jobopts
from corral import hostlist, jobsyntax, limits, slurmfmt
from corral.errors import CorralError
from corral.wire import corral_pb2 as pb

FUZZ = settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
# text biased toward the characters these grammars care about
GRAMMAR = st.text(
    alphabet=st.sampled_from(string.digits + "[]-,:%@+=*?!;_ ./abcdfhkmnoprstuxyzKMGTU\\\"'#\n\t"),
    max_size=60,
)
ANY_TEXT = st.one_of(GRAMMAR, st.text(max_size=60))


def _refuses_cleanly(parse: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(CorralError):
        parse(text)


@FUZZ
@given(ANY_TEXT)
def test_hostlist(text: str) -> None:
    try:
        names = hostlist.expand(text)
    except CorralError:
        return
    assert hostlist.expand(hostlist.compress(names)) == names if names else True


@FUZZ
@given(ANY_TEXT)
def test_job_syntax(text: str) -> None:
    for parse in (
        jobsyntax.parse_dependency,
        jobsyntax.parse_array,
        jobsyntax.parse_warn_signal,
        jobsyntax.signal_number,
    ):
        _refuses_cleanly(parse, text)


@FUZZ
@given(ANY_TEXT)
def test_durations_sizes_timestamps(text: str) -> None:
    _refuses_cleanly(slurmfmt.parse_duration, text)
    _refuses_cleanly(slurmfmt.parse_size_mb, text)
    _refuses_cleanly(lambda t: slurmfmt.parse_timestamp(t, now=1.8e9), text)


@FUZZ
@given(st.lists(ANY_TEXT, max_size=8))
def test_job_options(argv: list[str]) -> None:
    parser = jobopts.build_parser("sbatch")
    try:
        opts, _rest = parser.parse(argv)
        for key, parse in (
            ("gres", jobopts.parse_gres),
            ("nodes", jobopts.parse_nodes),
        ):
            if isinstance(opts.get(key), str):
                parse(opts[key])
    except CorralError:
        pass


@FUZZ
@given(st.lists(ANY_TEXT, max_size=6))
def test_sbatch_directives(lines: list[str]) -> None:
    script = "#!/bin/sh\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "true\n"
    try:
        args = jobopts.directives(script)
        jobopts.build_parser("sbatch").parse(args)
    except CorralError:
        pass


@FUZZ
@given(
    st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=20),
    st.lists(st.text(max_size=30), max_size=20),
    st.text(max_size=200),
)
def test_limits_accept_or_refuse_any_spec(env: dict[str, str], argv: list[str], name: str) -> None:
    with contextlib.suppress(CorralError):
        limits.check(pb.SubmitJobRequest(spec=pb.JobSpec(environment=env, argv=argv, name=name)))


@pytest.mark.parametrize("text", ["node[1-99999999]", "n[" * 2000, "x[0-1]" * 5000])
def test_pathological_hostlists_are_refused_quickly(text: str) -> None:
    _refuses_cleanly(hostlist.expand, text)
