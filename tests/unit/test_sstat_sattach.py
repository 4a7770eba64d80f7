"""sstat's and sattach's output beside what the real Slurm 22.05 printed
(tests/anchors/slurm-22.05): column names, widths, order and layout."""

from __future__ import annotations

import pathlib

import pytest

from client import sattach, sstat
from corral.errors import InvalidOption

ANCHOR = pathlib.Path(__file__).resolve().parents[1] / "anchors" / "slurm-22.05"

pytestmark = pytest.mark.timeout(30)


def anchor(name: str) -> str:
    return (ANCHOR / name).read_text()


def stat(step: str, *nodes: tuple[str, dict[str, object]], ntasks: int = 2) -> dict[str, object]:
    return {"step": step, "ntasks": ntasks, "nodes": [{"node": n, "live": lv} for n, lv in nodes]}


LIVE = {
    "usage": {"maxRssKb": "64676", "aveRssKb": "32315", "userCpuS": 1.5, "systemCpuS": 0.5},
    "maxVmemKb": "67772",
    "aveVmemKb": "33886",
    "pids": [15819, 15820],
    "ntasks": 2,
}
REPLY = {
    "state": "JOB_STATE_RUNNING",
    "steps": [stat("batch", ("localhost", LIVE), ntasks=1), stat("0", ("localhost", LIVE))],
}


def run(spec: str, *, all_steps: bool = False, step: str = "", **kw: object) -> list[str]:
    out, errors = sstat.format_stats(
        [(2, step, REPLY)],
        sstat.parse_fields(spec),
        all_steps=all_steps,
        **kw,  # type: ignore[arg-type]
    )
    assert errors == []
    return out.splitlines()


def test_the_default_header_is_slurms() -> None:
    ours = run(sstat.DEFAULT_FIELDS)
    theirs = anchor("sstat_default.txt").splitlines()
    assert ours[:2] == theirs[:2]  # every name, width and justification
    assert ours[2].startswith("2.0      ")  # the lowest srun step, not the batch one
    assert len(ours) == len(theirs) == 3


def test_with_a_format_the_columns_line_up_as_slurms() -> None:
    ours = run("JobID,MaxRSS,AveCPU,NTasks,TRESUsageInMax")
    theirs = anchor("sstat_o.txt").splitlines()
    assert ours[:2] == theirs[:2]
    assert [len(x) for x in ours[2].split(" ")] == [len(x) for x in theirs[2].split(" ")]
    assert ours[2].split()[:2] == ["2.0", "64676K"]


def test_widths_parsable_and_pid_layouts_are_slurms() -> None:
    assert run("jobid%20,maxrss%5")[:2] == anchor("sstat_width.txt").splitlines()[:2]
    assert run("jobid%20,maxrss%5")[2] == anchor("sstat_width.txt").splitlines()[2]  # 6467+
    assert (
        run("JobID,MaxRSS,AveCPU,NTasks", parsable="p")[0] == anchor("sstat_p.txt").splitlines()[0]
    )
    ours = run(sstat.PID_FIELDS)
    theirs = anchor("sstat_i.txt").splitlines()
    assert ours[:2] == theirs[:2]
    assert ours[2].split() == ["2.0", "localhost", "15819,15820"] == theirs[2].split()
    header = anchor("sstat_P_all.txt").splitlines()[0]
    assert run(sstat.DEFAULT_FIELDS, parsable="P")[0] == header


def test_all_steps_batch_first_and_tres_in_slurms_order() -> None:
    ours = run(
        "JobID,TRESUsageInMax,TRESUsageInMaxNode", all_steps=True, parsable="P", header=False
    )
    assert [line.split("|")[0] for line in ours] == ["2.batch", "2.0"]
    theirs = anchor("sstat_P_all.txt").splitlines()[1].split("|")
    names = anchor("sstat_P_all.txt").splitlines()[0].split("|")
    keys = [kv.split("=")[0] for kv in theirs[names.index("TRESUsageInMax")].split(",")]
    assert [kv.split("=")[0] for kv in ours[1].split("|")[1].split(",")] == keys
    assert ours[1].split("|")[2] == theirs[names.index("TRESUsageInMaxNode")]


def test_helpformat_lists_slurms_fields() -> None:
    assert sstat.help_fields().split() == anchor("sstat_e.txt").split()


def test_bad_input_says_what_slurm_says() -> None:
    with pytest.raises(InvalidOption, match='Invalid field requested: "Bogus"'):
        sstat.parse_fields("JobID,Bogus")
    with pytest.raises(InvalidOption, match="Bad job/step specified: abc"):
        sstat.parse_items("abc")
    _out, errors = sstat.format_stats(
        [(9, "", {"state": "JOB_STATE_COMPLETED"}), (2, "7", REPLY)],
        sstat.parse_fields("JobID"),
        all_steps=False,
    )
    assert errors == ["No steps running for job 9", "StepId=2.7 not found running."]


def test_sattach_layout_and_help_are_slurms() -> None:
    step = {"ntasks": 2, "nodelist": "localhost", "nodes": [{"node": "localhost", "ranks": [0, 1]}]}
    assert sattach.layout(step) == anchor("sattach_layout.txt")
    assert anchor("sattach_help.txt") == sattach.HELP
    with pytest.raises(InvalidOption, match="Failed to parse stepid"):
        sattach.parse_step(["12"])


def test_sattach_labels_and_filters_lines(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    p = sattach.Printer(True, 1, 0)
    p.write(0, False, b"out0-1\n")
    p.write(1, False, b"out1-1\nout1-")
    p.write(1, False, b"2\n")
    p.write(0, True, b"err0-1\n")
    p.write(1, True, b"err1-1\n")
    p.close()
    out, err = capfdbinary.readouterr()
    assert out == b"1: out1-1\n1: out1-2\n"
    assert err == b"0: err0-1\n"
