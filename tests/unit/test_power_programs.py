"""Running the power programs (ctld/powersave/power_programs.py, issue 27): one argument, a Slurm
hostlist; exit status and output reported; killed past the timeout; a missing program
or an unknown user a failure that says why."""

from __future__ import annotations

import os
import pathlib
import pwd
import tempfile
import time

import pytest

from ctld.powersave.power_programs import run_program


def script(tmp_path: pathlib.Path, body: str) -> str:
    path = tmp_path / "prog.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


async def test_the_hostlist_argument_and_success(tmp_path: pathlib.Path) -> None:
    prog = script(tmp_path, 'echo "got $1 as $(id -un)"')
    me = pwd.getpwuid(os.geteuid()).pw_name
    result = await run_program("resume", prog, ["n3", "n1", "n2", "gpu7"], user=me, timeout_s=10)
    assert result.ok and result.output.strip() == f"got gpu7,n[1-3] as {me}"


async def test_a_failure_carries_its_exit_and_last_line(tmp_path: pathlib.Path) -> None:
    prog = script(tmp_path, "echo trying; echo quota exceeded >&2; exit 4")
    result = await run_program("resume", prog, ["n1"], user="", timeout_s=10)
    assert not result.ok and result.detail == "exit 4: quota exceeded"


async def test_a_program_past_its_timeout_is_killed_with_its_children(
    tmp_path: pathlib.Path,
) -> None:
    prog = script(tmp_path, f"sleep 30 & echo $! > {tmp_path}/child; wait")
    began = time.monotonic()
    result = await run_program("suspend", prog, ["n1"], user="", timeout_s=0.5)
    assert not result.ok and result.detail == "timed out after 0.5s"
    assert time.monotonic() - began < 10
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        with open(f"/proc/{child}/stat") as fh:  # a zombie waiting for init is gone too
            if fh.read().split()[2] == "Z":
                break
        time.sleep(0.02)
    else:
        assert not os.path.exists(f"/proc/{child}")


async def test_a_missing_program_or_user(tmp_path: pathlib.Path) -> None:
    missing = await run_program("resume", str(tmp_path / "nope"), ["n1"], user="", timeout_s=5)
    assert not missing.ok and missing.detail.startswith("cannot run")
    prog = script(tmp_path, "true")
    nobody = await run_program("resume", prog, ["n1"], user="no-such-user-x", timeout_s=5)
    assert not nobody.ok and "cannot run" in nobody.detail


async def test_it_runs_as_the_configured_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    with tempfile.TemporaryDirectory() as where:  # one the user may reach
        os.chmod(where, 0o755)
        prog = script(pathlib.Path(where), "id -un")
        result = await run_program("resume", prog, ["n1"], user="nobody", timeout_s=10)
    assert result.ok and result.output.strip() == "nobody"
