"""A job's checkpoint directory belongs to that job alone, on real daemons (issue 36).

A job id names no job for good: a second cluster numbers from 1 too, and so does a
reinstalled one. The directory is named by the cluster, the job and the job's unique id
(corral/checkpoints.py); one whose marker (``.corral-job``) names another job is never
resumed from: the job fails to start and says why (noded/checkpoints.py). What a user
plants as the marker is read as root only as corral/userfile.py reads: no link
followed, no FIFO opened.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest

from corral.checkpoints import MARKER
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for
from tests.integration.realusers import Users, as_user, can_make_users, command, raw, submit_as

pytestmark = pytest.mark.timeout(240)

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train-checkpoint.py"

# run 0 leaves a mark in its directory and waits to be requeued; run 1 would add its own
REQUEUED = (
    "#!/bin/sh\n"
    'mkdir -p "$CORRAL_CHECKPOINT_DIR"\n'
    'echo "run $SLURM_RESTART_COUNT" >> "$CORRAL_CHECKPOINT_DIR/runs"\n'
    '[ "$SLURM_RESTART_COUNT" = 0 ] && sleep 120\n'
    "exit 0\n"
)


def test_job_1_of_a_second_cluster_starts_fresh_from_the_same_submit_dir(
    cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    """Two clusters (the same default name), one submit directory, the default root
    (``<submit dir>/.checkpoints``): the second cluster's job 1 trains from step 0 in a
    directory of its own, and the first's checkpoint and log stay as they were."""
    work = tmp_path / "work"
    work.mkdir()
    ran: list[tuple[LocalCluster, str]] = []
    for prefix in ("a", "b"):
        cluster = cluster_factory(nodes=1, gpus_per_node=0)
        cmd = Commands(cluster, work)
        job_id = cmd(
            "sbatch",
            "--parsable",
            "-o",
            f"{prefix}-%j.out",
            "--wrap",
            f"exec python3 {TRAIN} --steps 3 --step-time 0.05",
        ).stdout.strip()
        cmd.wait_state(job_id, "COMPLETED", timeout=60)
        ran.append((cluster, job_id))
    (first, first_id), (second, second_id) = ran
    assert first_id == second_id == "1"
    output = (work / "b-1.out").read_text()
    assert "starting fresh (run 0" in output and "resumed" not in output, output
    root = work / ".checkpoints"
    logs = {name: (root / name / "steps.log").read_text().splitlines() for name in os.listdir(root)}
    assert sorted(logs) == sorted([first.checkpoint_name("1"), second.checkpoint_name("1")])
    assert all(len(lines) == 3 and "run=0" in lines[0] for lines in logs.values()), logs


@pytest.fixture(scope="module", params=["noded.checkpoint_dir", "submit dir"])
def either_root(module_cluster_factory: ClusterFactory, request: Any) -> LocalCluster:
    """One node (a requeued job runs where it ran), checkpoints kept after the end."""
    kw: dict[str, Any] = {}
    if request.param == "noded.checkpoint_dir":
        state = module_cluster_factory.base / f"cluster{len(module_cluster_factory.started)}"
        kw["noded_config"] = f'checkpoint_dir = "{state / "checkpoints"}"'
    return module_cluster_factory(
        nodes=1, gpus_per_node=0, controller_config="checkpoint_cleanup = false", **kw
    )


def checkpoint_path(cluster: LocalCluster, work: pathlib.Path, job_id: str) -> pathlib.Path:
    root = cluster.state_dir / "checkpoints"
    if "checkpoint_dir" not in (cluster.noded_config or ""):
        root = work / ".checkpoints"
    return root / cluster.checkpoint_name(job_id)


def test_a_directory_marked_for_another_job_fails_the_start_and_is_left_alone(
    either_root: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """The job's directory turns out to be marked for another job (what a reinstalled
    cluster's leftovers, or a copied directory, hold): its next run does not start and
    says so, the directory's files untouched."""
    cmd = Commands(either_root, tmp_path)
    (tmp_path / "run.sh").write_text(REQUEUED)
    job_id = cmd("sbatch", "--parsable", "--requeue", "-o", "run.out", "run.sh").stdout.strip()
    path = checkpoint_path(either_root, tmp_path, job_id)
    wait_for(lambda: (path / "runs").exists(), 60, "the first run's mark")
    (path / MARKER).write_text("corral-1-0123456789abcdef\n")
    cmd("scontrol", "requeue", job_id)
    ended = cmd.wait_state(job_id, "FAILED", timeout=60)
    assert ended["reason"].startswith(
        "launch failed: checkpoint directory belongs to another job "
        "(.corral-job names corral-1-0123456789abcdef)"
    ), ended["reason"]
    shown = cmd("scontrol", "show", "job", job_id).stdout
    assert "JobState=FAILED Reason=launch_failed:_checkpoint_directory_belongs_to_another" in shown
    assert (path / "runs").read_text() == "run 0\n"  # run 1 never ran
    assert (path / MARKER).read_text() == "corral-1-0123456789abcdef\n"


@pytest.fixture(scope="module")
def plain(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(nodes=1, gpus_per_node=0)


@pytest.mark.skipif(not can_make_users(), reason="needs root and useradd")
@pytest.mark.parametrize("planted", ["link to a root-only file", "fifo"])
def test_a_marker_a_user_plants_is_never_followed_nor_opened(
    plain: LocalCluster, users: Users, planted: str
) -> None:
    """Alice's job makes its directory in her home; she swaps its marker for a link to a
    root-only file, or a FIFO (an open would wait for a writer), and requeues the job:
    its next run fails at once naming the marker, the root file is neither read into
    the reason nor touched, and noded goes on starting jobs."""
    cluster = plain
    alice, home = users.alice, users.home(users.alice)
    secret = users.base / f"secret-{planted[:4]}"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    (home / "run.sh").write_text(REQUEUED)
    os.chown(home / "run.sh", alice.pw_uid, alice.pw_gid)
    job_id = submit_as(cluster, users, alice, "--requeue", "-o", "run.out", str(home / "run.sh"))
    path = home / ".checkpoints" / cluster.checkpoint_name(job_id)
    wait_for(lambda: (path / "runs").exists(), 60, "the first run's mark")

    def plant() -> None:
        if planted == "fifo":
            os.mkfifo(path / MARKER)
        else:
            os.symlink(secret, path / MARKER)

    code, _, err = as_user(alice, plant)
    assert code == 0, err
    code, _, err = command(cluster, alice, "scontrol", "requeue", str(job_id), cwd=home)
    assert code == 0, err
    ended = cluster.wait_state(job_id, "FAILED", timeout=60)
    assert f"checkpoint directory's {MARKER} is not" in ended["reason"], ended["reason"]
    assert "secret" not in ended["reason"]
    assert secret.read_text() == "root's secret\n" and secret.stat().st_uid == 0
    assert (path / "runs").read_text() == "run 0\n"
    after = submit_as(cluster, users, alice, "--wrap", "true")
    cluster.wait_state(after, "COMPLETED", timeout=60)


@pytest.mark.skipif(not can_make_users(), reason="needs root and useradd")
def test_a_directory_another_user_plants_in_a_shared_submit_dir_is_never_resumed(
    plain: LocalCluster, users: Users
) -> None:
    """Alice submits from a directory everyone may write in (sticky, as /tmp). Bob,
    who knows her job's directory name (he may not read it from ctld: the unique id is
    hers alone), plants it with a checkpoint of his before her job starts: the job
    fails to start, naming the directory, and never loads his checkpoint."""
    alice, bob = users.alice, users.bob
    shared = users.base / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    script = shared / "train.sh"
    script.write_text(REQUEUED)
    os.chown(script, alice.pw_uid, alice.pw_gid)
    job_id = submit_as(plain, users, alice, "-H", "-D", str(shared), "-o", "a.out", str(script))
    name = plain.checkpoint_name(job_id)  # (as root: the test knows it)
    seen = raw(plain, bob, "GetJobs", {"filter": {"jobIds": [str(job_id)]}})["ok"]["jobs"][0]
    assert "uniqueId" not in seen and name.split("-")[-1] not in json.dumps(seen)

    def plant() -> None:
        planted = shared / ".checkpoints" / name
        planted.mkdir(parents=True)
        (planted / "checkpoint.json").write_text('{"step": 999, "loss": 0.0}')

    code, _, err = as_user(bob, plant)
    assert code == 0, err
    code, _, err = command(plain, alice, "scontrol", "release", str(job_id), cwd=users.home(alice))
    assert code == 0, err
    ended = plain.wait_state(job_id, "FAILED", timeout=60)
    assert "checkpoint directory is not a directory of the job's user" in ended["reason"], ended
    assert not (shared / ".checkpoints" / name / "runs").exists()  # the script never ran
