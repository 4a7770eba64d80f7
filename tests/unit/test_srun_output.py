"""srun's output writer (client/srun.py Output): whole lines only, in order per task,
labelled with -l, passed through with -u; what is left at the end is written once."""

from __future__ import annotations

import pathlib

import pytest

from client.srun import Output, array_ids

STEP = {"stepId": 0, "nodes": [{"node": "n1", "ranks": [0, 1]}]}
JOB = {"jobId": "7", "spec": {"name": "x"}, "user": "u"}


def test_whole_lines_only_and_the_rest_at_the_end(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    o = Output({}, JOB, STEP)
    o.write(0, False, b"a1\na2")
    assert capsysbinary.readouterr().out == b"a1\n"  # never a part of a line
    o.write(1, False, b"b1")
    o.write(0, False, bytearray(b"-end\n"))
    o.write(1, False, b"-end\nb2\n")
    assert capsysbinary.readouterr().out == b"a2-end\nb1-end\nb2\n"
    o.write(0, False, b"no newline")
    assert capsysbinary.readouterr().out == b""
    o.close()
    assert capsysbinary.readouterr().out == b"no newline"


def test_label_prefixes_every_line_with_its_rank(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    o = Output({"label": True}, JOB, STEP)
    o.write(1, False, b"x\ny")
    o.write(1, False, b"z\n")
    o.write(0, True, b"w\n")
    o.close()
    captured = capsysbinary.readouterr()
    assert (captured.out, captured.err) == (b"1: x\n1: yz\n", b"0: w\n")


def test_unbuffered_passes_bytes_through(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    o = Output({"unbuffered": True}, JOB, STEP)
    o.write(0, False, b"par")
    assert capsysbinary.readouterr().out == b"par"
    o.write(0, False, b"tial")
    assert capsysbinary.readouterr().out == b"tial"


def test_files_by_pattern(tmp_path: pathlib.Path) -> None:
    o = Output({"output": f"{tmp_path}/out-%t.txt"}, JOB, STEP)
    o.write(0, False, b"zero\n")
    o.write(1, False, b"one\n")
    o.close()
    assert (tmp_path / "out-0.txt").read_bytes() == b"zero\n"
    assert (tmp_path / "out-1.txt").read_bytes() == b"one\n"


def test_files_of_an_array_task_take_its_array_ids(tmp_path: pathlib.Path) -> None:
    task = {"jobId": "9", "arrayJobId": "7", "arrayTaskId": 2, "spec": {"name": "x"}, "user": "u"}
    o = Output({"output": f"{tmp_path}/%A_%a-%j-%J-%t.txt"}, task, STEP)
    o.write(1, False, b"one\n")
    o.close()
    assert (tmp_path / "7_2-9-9.0-1.txt").read_bytes() == b"one\n"


def test_array_ids_from_the_environment_only_inside_that_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    assert array_ids({"jobId": "9"}) == (7, 2)  # a ctld that does not send them
    assert array_ids({"jobId": "10"}) == (0, None)  # srun --jobid=10: not this job's
