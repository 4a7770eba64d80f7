"""What noded (root) writes for a job's user never goes through a link she made, and
what it trusts from the spool is its own (jobdir.py, records.py, guard.py, env.py).
The same attacks through the real daemons: tests/integration/test_local_attacker_node.py."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

from corral.testing import wait_for
from noded import guard, jobdir, records, spool
from noded.env import job_umask
from noded.progress import make_file

ROOT = os.geteuid() == 0
OTHER = 4242  # a uid that is not ours: the job's user in these tests
as_root = pytest.mark.skipif(not ROOT, reason="hands files to another uid")


def _sleep(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``sleep 30`` with ``env``, once it runs (before exec, /proc shows our environment)."""
    proc = subprocess.Popen(["sleep", "30"], env=env)
    wait_for(lambda: pathlib.Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"))
    return proc


def _root_file(path: pathlib.Path, text: str = "root's\n", mode: int = 0o600) -> pathlib.Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _unchanged(path: pathlib.Path, text: str = "root's\n") -> bool:
    st = path.lstat()
    return st.st_uid == os.geteuid() and path.read_text() == text


@as_root
def test_a_fresh_job_dir_replaces_a_users_old_one_and_follows_nothing(
    tmp_path: pathlib.Path,
) -> None:
    target = _root_file(tmp_path / "secret")
    writable = _root_file(tmp_path / "shared", mode=0o666)
    old = tmp_path / "job00000007"  # an older noded's: the user's own, with her links
    old.mkdir()
    (old / "progress").symlink_to(target)
    (old / "state.json.tmp").symlink_to(target)
    os.link(writable, old / "script")
    (old / "sub").mkdir()
    (old / "sub" / "deep").symlink_to(tmp_path)
    for p in (old, old / "sub"):
        os.chown(p, OTHER, OTHER)
    made = jobdir.make_dir(str(old))
    st = os.lstat(made)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0
    assert stat.S_IMODE(st.st_mode) == jobdir.JOB_DIR_MODE and os.listdir(made) == []
    assert _unchanged(target) and _unchanged(writable)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job00000007", "secret", "shared"]
    # the user's files in it: made afresh and handed over by descriptor
    script = os.path.join(made, "script")
    jobdir.create_for_user(script, OTHER, OTHER, data=b"#!/bin/sh\n", mode=0o700)
    st = os.lstat(script)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (OTHER, OTHER, 0o700)
    assert make_file(os.path.join(made, "progress"), OTHER, OTHER)
    st = os.lstat(os.path.join(made, "progress"))
    assert st.st_uid == OTHER and st.st_mtime == 0


def test_a_users_file_is_never_made_through_a_link(tmp_path: pathlib.Path) -> None:
    target = _root_file(tmp_path / "secret")
    link = tmp_path / "progress"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        jobdir.create_for_user(str(link), OTHER, OTHER)
    hard = tmp_path / "script"
    os.link(target, hard)
    with pytest.raises(FileExistsError):
        jobdir.create_for_user(str(hard), OTHER, OTHER, data=b"x")
    assert _unchanged(target)


def test_the_cancel_line_goes_only_to_the_users_own_regular_file(tmp_path: pathlib.Path) -> None:
    me = os.geteuid()
    own = tmp_path / "slurm-1.out"
    own.write_text("out\n")
    assert jobdir.append_to_users_file(str(own), me, "CANCELLED\n")
    assert own.read_text() == "out\nCANCELLED\n"
    target = _root_file(tmp_path / "secret")
    (tmp_path / "link.out").symlink_to(target)
    assert not jobdir.append_to_users_file(str(tmp_path / "link.out"), me, "x\n")
    # a hard link to another's file: not the job user's
    assert not jobdir.append_to_users_file(str(target), OTHER, "x\n")
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)  # never opened (no reader: an open would block or fail)
    assert not jobdir.append_to_users_file(str(fifo), me, "x\n")
    assert not jobdir.append_to_users_file("/dev/null", me, "x\n")  # a device: never opened
    assert not jobdir.append_to_users_file(str(tmp_path / "missing.out"), me, "x\n")
    assert not (tmp_path / "missing.out").exists() and _unchanged(target)


@as_root
def test_a_checkpoint_dir_is_handed_over_only_when_noded_made_it(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "ckpt"
    jobdir.make_user_dir(str(root / "12"), OTHER, OTHER)
    assert (root / "12").stat().st_uid == OTHER and root.stat().st_uid == 0
    (root / "13").symlink_to(tmp_path)  # made beforehand: left alone, never chowned
    jobdir.make_user_dir(str(root / "13"), OTHER, OTHER)
    assert tmp_path.stat().st_uid == 0


def test_the_spool_must_be_roots_alone(tmp_path: pathlib.Path) -> None:
    node = tmp_path / "spool" / "n1"
    node.mkdir(parents=True)
    tmp_path.chmod(0o755)
    assert spool.check_private(str(node)) == ""
    node.chmod(0o777)
    assert "can be changed by other users" in spool.check_private(str(node))
    node.chmod(0o755)
    (tmp_path / "spool").chmod(0o777)  # a parent anyone may rename things in
    assert str(tmp_path / "spool") in spool.check_private(str(node))
    (tmp_path / "spool").chmod(0o1777)  # sticky above the spool (as /tmp): fine
    assert spool.check_private(str(node)) == ""


def test_records_live_in_a_root_only_directory(tmp_path: pathlib.Path) -> None:
    st = records.JobState(job_id=3, restart_count=0, marker="n1:3:t", uid=OTHER, since=1.0)
    records.save_job(str(tmp_path), st)
    records.save_step(str(tmp_path), records.StepState(3, 0, "n1:3:t.0", OTHER, 2.0))
    d = tmp_path / records.STATE_DIR
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert records.load_jobs(str(tmp_path)) == [st]
    assert records.load_claims(str(tmp_path)) == [
        records.Claim(records.MARKER_VAR, "n1:3:t", OTHER, 1.0),
        records.Claim(records.STEP_MARKER_VAR, "n1:3:t.0", OTHER, 2.0),
    ]
    records.remove_job(str(tmp_path), 3)
    records.remove_step(str(tmp_path), 3, 0)
    assert records.load_claims(str(tmp_path)) == []


def test_a_claim_needs_marker_uid_and_start_time(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, records.MARKER_VAR: "n1:3:t"}
    proc = _sleep(env)
    try:
        me, since = os.getuid(), time.time() - 1
        assert records.claimed(proc.pid, [records.Claim(records.MARKER_VAR, "n1:3:t", me, since)])
        for claim in (
            records.Claim(records.MARKER_VAR, "n1:4:t", me, since),  # another marker
            records.Claim(records.STEP_MARKER_VAR, "n1:3:t", me, since),  # another variable
            records.Claim(records.MARKER_VAR, "n1:3:t", me + 1, since),  # another uid
            records.Claim(records.MARKER_VAR, "n1:3:t", me, time.time() + 60),  # older
        ):
            assert not records.claimed(proc.pid, [claim]), claim
        assert not records.claimed(os.getpid(), [records.Claim(records.MARKER_VAR, "", me, 0)])
        started = records.start_time(proc.pid)
        assert started is not None and abs(started - time.time()) < 60
        assert records.real_uid(proc.pid) == me
        found = records.scan([records.Claim(records.MARKER_VAR, "n1:3:t", me, since)])
        assert found == {proc.pid}
    finally:
        proc.kill()
        proc.wait(10)


def test_the_fence_guard_kills_only_claimed_processes_and_says_when(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, records.MARKER_VAR: "n1:3:tok"}
    st = records.JobState(
        job_id=3, restart_count=0, marker="n1:3:tok", uid=os.getuid(), since=time.time()
    )
    records.save_job(str(tmp_path), st)
    claimed = _sleep(env)
    forged = _sleep({**env, records.MARKER_VAR: "n1:4:tok"})
    try:
        # only what a record claims (its marker, uid and time), whatever the token
        assert guard.jobs_processes(tmp_path) == {claimed.pid}
    finally:
        for p in (claimed, forged):
            p.kill()
            p.wait(10)
    guard.say("n1", "ctld not heard from", processes=2)
    line = capsys.readouterr().err
    assert re.match(r"timestamp=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z level=warning ", line)
    assert 'event="ctld not heard from"' in line and "node=n1 processes=2" in line


def test_the_guard_fences_past_its_time_unless_a_fresh_hold_says_ctld_is_lost_to_most(
    tmp_path: pathlib.Path,
) -> None:
    """The guard's one rule (witness.py keeps ``hold`` fresh while most of the cluster
    does not hear ctld): a dead noded's hold goes stale and the guard fences."""
    env = {**os.environ, records.MARKER_VAR: "n1:3:tok"}
    st = records.JobState(3, 0, "n1:3:tok", uid=os.getuid(), since=time.time())
    records.save_job(str(tmp_path), st)
    (tmp_path / "instances").write_text("tok\n")
    contact, hold = tmp_path / guard.CONTACT_FILE, tmp_path / guard.HOLD_FILE
    job = _sleep(env)
    try:
        contact.touch()
        os.utime(contact, (time.time() - 30, time.time() - 30))  # ctld silent 30 s
        hold.touch()  # ... but most nodes do not hear it either, as of now
        runner = subprocess.Popen(
            [sys.executable, "-m", "noded.guard", str(tmp_path), "n1", "tok", "5", "999999"]
        )
        try:
            time.sleep(1.0)  # the guard polls every 0.2 s: five looks at a fresh hold
            assert job.poll() is None, "a fresh hold must keep the job"
            os.utime(hold, (time.time() - 6, time.time() - 6))  # no noded refreshes it
            job.wait(10)
            assert job.returncode == -signal.SIGKILL
        finally:
            (tmp_path / "instances").write_text("other\n")  # a newer noded: it exits
            runner.wait(10)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(10)


@pytest.mark.parametrize(
    ("value", "mask"),
    [
        *[("0077", "0077"), ("077", "0077"), ("22", "0022"), ("0", "0000"), ("", "")],
        *[("0x22", ""), ("999", ""), ("00777", ""), ("-1", ""), (" 027 ", "0027")],
    ],
)
def test_slurm_umask_is_an_octal_mask_or_nothing(value: str, mask: str) -> None:
    assert job_umask({"SLURM_UMASK": value}) == mask


def test_a_checkpoint_directory_goes_only_if_it_is_the_owners_own_and_no_link(
    tmp_path: pathlib.Path,
) -> None:
    from noded.jobdir import discard_users_dir

    root = tmp_path / "ckpt"
    root.mkdir()
    me = os.getuid()
    mine = root / "7"
    mine.mkdir()
    (mine / "model.pt").write_text("w")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    (mine / "link").symlink_to(outside)
    (root / "8").symlink_to(outside)  # a link in place of the directory: left alone
    assert not discard_users_dir(str(root), "8", me)
    assert not discard_users_dir(str(root), "7", me + 1)  # someone else's: left
    assert not discard_users_dir(str(root), "../outside", me)
    assert discard_users_dir(str(root), "7", me)
    assert not mine.exists() and (outside / "keep").exists()
    assert sorted(p.name for p in root.iterdir()) == ["8"]
