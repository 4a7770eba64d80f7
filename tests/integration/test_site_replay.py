"""corral sim --from-store on a real cluster's history: real daemons run a mixed workload
(an array with a %N throttle, GPU jobs of 1, 2 and 4 GPUs, two accounts, a job in an
advance reservation), then the replay of the store reproduces the real starts under the
running configuration, and under a candidate that doubles one account's fair-share that
account waits less. A second real user cannot read the store through it, and the SWF
export names nobody."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for
from tests.integration.realusers import Users, as_user, can_make_users, submit_as

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

CORRAL = pathlib.Path(sys.executable).parent / "corral"
# the stated error of the replay's starts: within 5 s of the real start, or 10% of the
# job's real wait if that is more (jobs here run 4-8 s; a real start lags its pass by
# the commit and the node's report of the end before it by up to a heartbeat)
TOLERANCE_S = 5.0


def accounts(user: str, other: str) -> str:
    # two accounts, the same share each, the same two users in each; age counts little
    # within minutes: fair-share orders the queue
    return (
        f'\n[[accounts]]\nname = "a"\nusers = ["{user}", "{other}"]\n'
        f'[[accounts]]\nname = "b"\nusers = ["{user}", "{other}"]\n'
    )


def submit(cmd: Commands, *args: str) -> str:
    return cmd("sbatch", "--parsable", *args).stdout.strip().split(";")[0]


def replay(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(CORRAL),
            "sim",
            "--from-store",
            str(cluster.config_path),
            "--json",
            "--tolerance",
            str(TOLERANCE_S),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.skipif(not can_make_users(), reason="needs root and useradd")
def test_the_replay_of_a_real_history_matches_it_and_answers_what_if(
    users: Users, cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    from corral.identity import current_identity

    me = current_identity().user
    cluster = cluster_factory(
        nodes=2, gpus_per_node=4, extra_config=accounts(me, users.alice.pw_name)
    )
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(cluster, work)
    # phase 1: usage behind the accounts, a's 1.4 times b's, more than the burst below
    # adds: b goes first now, and with twice the shares a would
    first = [
        submit(cmd, "-A", "a", "--gres=gpu:4", "-t", "1", "--wrap", "sleep 20"),
        submit(cmd, "-A", "b", "--gres=gpu:4", "-t", "1", "--wrap", "sleep 14"),
    ]
    for j in first:
        cmd.wait_state(j, "COMPLETED", timeout=60)
    # ... counted in the queue's priorities (a recalculation after both ended), as two
    # probes waiting for their --begin time show
    probes = [submit(cmd, "-A", acct, "--begin=now+3600", "--wrap", "true") for acct in "ab"]
    wait_for(
        lambda: _fairshare(cmd, probes[0]) < _fairshare(cmd, probes[1]),
        90,
        "a's fair-share factor below b's",
    )
    cmd("scancel", *probes)
    # phase 2: node02 reserved for account b from 20 s to 60 s from now
    cmd(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=lab",
        "StartTime=now+20",
        "Duration=0:40",
        "Nodes=node02",
        "Accounts=b",
    )
    reserved_from = _reservation_start(cmd)
    jobs = [
        submit(cmd, "-A", "a", "--array=0-3%2", "--gres=gpu:1", "-t", "1", "--wrap", "sleep 6"),
        submit(cmd, "-A", "a", "--gres=gpu:4", "-t", "1", "--wrap", "sleep 5"),
        submit(cmd, "-A", "a", "--gres=gpu:2", "-t", "1", "--wrap", "sleep 4"),
        submit(cmd, "-A", "b", "--gres=gpu:2", "-t", "1", "--wrap", "sleep 5"),
        submit(cmd, "-A", "b", "--gres=gpu:2", "-t", "1", "--wrap", "sleep 5"),
        submit(cmd, "-A", "b", "--gres=gpu:4", "-t", "1", "--wrap", "sleep 6"),
        submit(
            cmd, "-A", "b", "--reservation=lab", "--gres=gpu:2", "-t", "0:20", "--wrap", "sleep 4"
        ),
    ]
    # a second real user's job in b: her name must not leave the store in the export
    theirs = str(
        submit_as(
            cluster,
            users,
            users.alice,
            "-A",
            "b",
            "-J",
            "alice-thesis",
            "--gres=gpu:1",
            "-t",
            "1",
            "--wrap",
            "sleep 3",
        )
    )
    wait_for(lambda: _all_ended(cluster), 240, "every job to end")
    started = {j["jobId"]: float(j["startTime"]) for j in _jobs(cluster) if j.get("startTime")}
    assert reserved_from and started[jobs[-1]] >= reserved_from  # inside its window

    report = replay(cluster, "--set", "accounts.a.shares=2")
    fid = report["fidelity"]
    total = len(started)
    assert total == 13 and fid["compared"] == total
    assert fid["within"] >= 0.9 * total, fid["line"]
    assert fid["median_s"] <= 2.0, fid["line"]
    runs = report["runs"]
    real, running, candidate = runs["real"], runs["running"], runs["candidate"]
    assert real["total"]["jobs"] == running["total"]["jobs"] == total + len(probes)
    # the candidate doubles a's share: a waits less, b more, its target is two thirds
    a_then, a_now = running["account"]["a"]["mean_wait"], candidate["account"]["a"]["mean_wait"]
    assert a_now < a_then, (a_then, a_now)
    assert candidate["account"]["b"]["mean_wait"] > running["account"]["b"]["mean_wait"]
    gpu_h = sum(s["gpu_hours"] for s in candidate["account"].values())
    assert candidate["account"]["a"]["target_gpu_hours"] == pytest.approx(gpu_h * 2 / 3, rel=0.01)
    assert report["changes"] == ["accounts.a.shares: 1 -> 2"]
    # per partition and per user, as the text tables print them
    assert set(running["partition"]) == {"debug"}
    assert 0 < running["partition"]["debug"]["gpu_util"] <= 1
    assert users.alice.pw_name in running["user"]

    # the text form, and the figures
    shown = subprocess.run(
        [
            str(CORRAL),
            "sim",
            "--from-store",
            str(cluster.config_path),
            "--set",
            "accounts.a.shares=2",
            "--plot",
            str(tmp_path / "what-if.png"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].startswith(f"{total + 2} jobs submitted")
    assert "candidate: accounts.a.shares: 1 -> 2" in shown.stdout
    assert (tmp_path / "what-if.png").stat().st_size > 10_000 or "matplotlib" in shown.stderr

    # anonymised SWF: no one's name or account; users and groups are 1, 2, ...
    swf = tmp_path / "site.swf"
    cmd("corral", "sim", "--from-store", str(cluster.config_path), "--export-swf", str(swf))
    text = swf.read_text()
    for secret in (users.alice.pw_name, "alice-thesis", me, "lab"):
        assert secret not in text
    lines = [ln.split() for ln in text.splitlines() if not ln.startswith(";")]
    assert len(lines) == total + len(probes)  # the probes too: cancelled while pending
    assert {int(f[11]) for f in lines} == {1, 2} and {int(f[12]) for f in lines} == {1, 2}
    assert theirs in started

    # another real user cannot read the store through corral sim
    def other() -> int:
        from ctld.sim.site_cli import main

        return main(["--from-store", str(cluster.config_path)])

    code, _out, err = as_user(users.bob, other)
    assert code == 1 and "cannot read the store: Permission denied" in err, err
    assert "Traceback" not in err


def _fairshare(cmd: Commands, job_id: str) -> float:
    """The fair-share part of ``job_id``'s priority (sprio's FAIRSHARE)."""
    shown = cmd("sprio", "-h", "-j", job_id, "-o", "%i %F", check=False).stdout.split()
    return float(shown[1]) if len(shown) == 2 else 10000.0


def _jobs(cluster: LocalCluster) -> list[dict[str, Any]]:
    return list(cluster.client().get_jobs({"filter": {}})["jobs"])


def _all_ended(cluster: LocalCluster) -> bool:
    found = _jobs(cluster)
    return bool(found) and all(
        j["state"] in ("JOB_STATE_COMPLETED", "JOB_STATE_CANCELLED") for j in found
    )


def _reservation_start(cmd: Commands) -> float:
    shown = cmd("scontrol", "show", "reservation", "lab", check=False).stdout
    for word in shown.split():
        if word.startswith("StartTime="):
            return time.mktime(time.strptime(word.split("=", 1)[1], "%Y-%m-%dT%H:%M:%S"))
    return 0.0
