"""A job's checkpoint directory is its own: named by the cluster, the job and its unique
id, marked inside, and refused when its marker names another job (corral/checkpoints.py,
noded/checkpoints.py). Through the real daemons: tests/integration/test_checkpoint_dirs.py."""

from __future__ import annotations

import os
import pathlib

import pytest

from corral.checkpoints import MARKER, checkpoint_name, new_unique_id
from corral.errors import LaunchError
from corral.wire import corral_pb2 as pb
from noded import checkpoints

ROOT = os.geteuid() == 0
OTHER = 4242  # a uid that is not ours: the job's user in these tests
as_root = pytest.mark.skipif(not ROOT, reason="hands files to another uid")


def test_the_name_tells_two_clusters_job_1_apart_and_keeps_the_old_name_without_an_id() -> None:
    first = pb.Job(job_id=1, cluster="lab", unique_id=new_unique_id())
    second = pb.Job(job_id=1, cluster="lab", unique_id=new_unique_id())
    assert checkpoint_name(first) != checkpoint_name(second)
    assert checkpoint_name(first) == f"lab-1-{first.unique_id}"
    task = pb.Job(job_id=9, array_job_id=7, array_task_id=2, cluster="a/../b", unique_id="x/y")
    assert checkpoint_name(task) == "a_.._b-7_2-x_y"  # one path component, whatever the parts
    assert checkpoint_name(pb.Job(job_id=5, cluster="..", unique_id="u")) == "corral-5-u"
    # submitted by an older ctld: a requeue after the upgrade finds its directory
    assert checkpoint_name(pb.Job(job_id=5, cluster="lab")) == "5"


@as_root
def test_noded_makes_it_marked_and_the_users_under_its_root(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ckpt" / "lab-3-abc"
    checkpoints.prepare(str(path), OTHER, OTHER, make=True)
    assert path.stat().st_uid == OTHER and (path / MARKER).read_text() == "lab-3-abc\n"
    assert (path / MARKER).stat().st_uid == OTHER
    checkpoints.prepare(str(path), OTHER, OTHER, make=True)  # the next run: its own, fine


@pytest.mark.parametrize("make", [True, False])
def test_a_directory_whose_marker_names_another_job_is_refused(
    tmp_path: pathlib.Path, make: bool
) -> None:
    me = os.getuid()
    path = tmp_path / "lab-1-new"
    path.mkdir()
    (path / "checkpoint.json").write_text('{"step": 40}')
    (path / MARKER).write_text("lab-1-old\n")
    with pytest.raises(LaunchError, match=r"another job \(\.corral-job names lab-1-old\)"):
        checkpoints.prepare(str(path), me, me, make=make)
    (path / MARKER).write_text("\n")
    with pytest.raises(LaunchError, match="names nothing of ours"):
        checkpoints.prepare(str(path), me, me, make=make)
    (path / MARKER).unlink()
    checkpoints.prepare(str(path), me, me, make=make)  # none: made by this job itself


def test_a_marker_that_is_a_link_or_a_fifo_is_not_read(tmp_path: pathlib.Path) -> None:
    me = os.getuid()
    path = tmp_path / "lab-1-abc"
    path.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("lab-1-abc\n")
    (path / MARKER).symlink_to(elsewhere)
    with pytest.raises(LaunchError, match="not a regular file"):
        checkpoints.prepare(str(path), me, me, make=False)
    (path / MARKER).unlink()
    os.mkfifo(path / MARKER)  # never opened: an open would wait for a writer
    with pytest.raises(LaunchError, match="not a regular file"):
        checkpoints.prepare(str(path), me, me, make=False)


@as_root
@pytest.mark.parametrize("make", [True, False])
def test_a_directory_of_another_user_is_refused(tmp_path: pathlib.Path, make: bool) -> None:
    # under the operator's root, or planted in a submit dir others may write in (/tmp)
    path = tmp_path / "lab-4-abc"
    path.mkdir()
    os.chown(path, OTHER + 1, OTHER + 1)
    with pytest.raises(LaunchError, match="not a directory of the job's user"):
        checkpoints.prepare(str(path), OTHER, OTHER, make=make)
    path.rmdir()
    path.symlink_to(tmp_path)  # a link in its place: not followed, not hers
    with pytest.raises(LaunchError, match="not a directory of the job's user"):
        checkpoints.prepare(str(path), OTHER, OTHER, make=make)


def test_removal_keeps_a_directory_marked_for_another_job(tmp_path: pathlib.Path) -> None:
    me = os.getuid()
    for name, marker in (("lab-1-a", "lab-1-b\n"), ("lab-2-a", "lab-2-a\n"), ("3", None)):
        (tmp_path / name).mkdir()
        if marker is not None:
            (tmp_path / name / MARKER).write_text(marker)
    assert not checkpoints.remove(str(tmp_path), "lab-1-a", me)
    assert checkpoints.remove(str(tmp_path), "lab-2-a", me)
    assert checkpoints.remove(str(tmp_path), "3", me)  # from before markers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab-1-a"]
