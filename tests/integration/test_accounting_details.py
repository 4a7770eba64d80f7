"""Accounting details as a Slurm user expects them, on real daemons (issue 36).

A cancelled job's srun step is CANCELLED; a job without ``-A`` is charged to its user's
default account and says so everywhere; a pending job's page names the nodes it is
planned on as planned, not as its nodes; ``sstat`` of a job that is not there fails
once, non-zero; the owner (and an operator, nobody else) gets a job's batch script
back (``scontrol write batch_script``, ``sacct --batch-script``); a requeued job's page
shows its effective training time beside the current run's Elapsed.
"""

from __future__ import annotations

import html
import json
import pathlib
import pwd
import re
import urllib.request
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN, Commands, wait_for
from tests.integration.realusers import Users, can_make_users, command, submit_as

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

SCRIPT = (
    "#!/bin/sh\n#SBATCH -J kept-script\n"
    "# a line only its owner should read: 7f3a-owner-only\nsleep 600\n"
)


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=2, gpus_per_node=2, controller_config=f'operators = ["{users.op.pw_name}"]'
    )


def run(cluster: LocalCluster, users: Users, pw: pwd.struct_passwd, *argv: str) -> Any:
    return command(cluster, pw, *argv, cwd=users.home(pw))


def page(cluster: LocalCluster, pw: pwd.struct_passwd, path: str) -> str:
    """The web view of ``path`` as ``pw`` sees it (a session from her own web-login),
    its HTML as text."""
    code, out, err = command(cluster, pw, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    token = out.strip().split("#token=", 1)[1]
    base = f"http://{cluster.http_address}"
    body = json.dumps({"token": token}).encode()
    login = urllib.request.Request(
        base + "/login", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(login, timeout=10) as resp:
        session = json.loads(resp.read())["session"]
    view = urllib.request.Request(
        base + "/view" + path, headers={"Authorization": f"Bearer {session}"}
    )
    with urllib.request.urlopen(view, timeout=10) as resp:
        made = json.loads(resp.read())["html"]
    return html.unescape(re.sub(r"<[^>]+>", "\n", made))


def fact(text: str, name: str) -> str | None:
    """A job page's fact (``<dt>name</dt><dd>value</dd>``), None when it has none."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[lines.index(name) + 1] if name in lines else None


def test_the_srun_step_of_a_cancelled_job_is_cancelled(
    lab: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """``scancel JOB`` kills its srun step's tasks by signal: the step is CANCELLED, as
    the job and its batch step are (Slurm), not FAILED."""
    cmd = Commands(lab, tmp_path)
    job = cmd("sbatch", "--parsable", "--wrap", f"{BIN}/srun sleep 300").stdout.strip()
    wait_for(lambda: lab.job(job).get("steps"), 30, "the srun step")
    cmd("scancel", job)
    lab.wait_state(job, "CANCELLED")

    def rows() -> list[str] | None:
        out = cmd("sacct", "-j", job, "-n", "-P", "-o", "JobID,State").stdout.split()
        return out if any(r.startswith(f"{job}.0|") for r in out) else None

    listed = wait_for(rows, 30, "the step's record")
    assert f"{job}.0|CANCELLED" in listed, listed
    assert f"{job}.batch|CANCELLED" in listed, listed


def test_a_job_without_an_account_shows_its_default_account_everywhere(
    lab: LocalCluster, users: Users
) -> None:
    """Bob has no association (a fresh cluster takes every job) and submits without
    ``-A``: the job is charged to root, where fair-share counts it, and sacct, squeue,
    scontrol and the web queue and job page all say root, as sshare does."""
    bob = users.bob
    job = submit_as(lab, users, bob, "-J", "no-account", "--wrap", "sleep 300")
    lab.wait_state(job, "RUNNING")
    code, out, err = run(
        lab, users, bob, "sacct", "-j", str(job), "-X", "-n", "-P", "-o", "Account"
    )
    assert (code, out.strip()) == (0, "root"), err
    code, out, _ = run(lab, users, bob, "squeue", "-j", str(job), "-h", "-o", "%a")
    assert out.strip() == "root"
    code, out, _ = run(lab, users, bob, "scontrol", "show", "job", str(job))
    assert " Account=root " in out, out
    assert (
        fact(page(lab, bob, f"/job/{job}"), "User / account")
        == f"{bob.pw_name} / root (QOS normal)"
    )
    queue = page(lab, bob, "/queue")
    assert re.search(rf"\b{job}\b[\s\S]*?\bno-account\b[\s\S]*?\broot\b", queue), queue
    code, out, _ = run(lab, users, bob, "scancel", str(job))
    lab.wait_state(job, "CANCELLED")


def test_a_pending_jobs_page_names_its_planned_nodes_as_planned(
    lab: LocalCluster, users: Users
) -> None:
    """Every GPU is held; a GPU job waits with a forecast: its page has no Nodes (it
    holds none: scontrol's NodeList is empty), and says where it is planned to run."""
    alice = users.alice
    hog = submit_as(lab, users, alice, "-N2", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 300")
    lab.wait_state(hog, "RUNNING")
    waiting = submit_as(lab, users, alice, "--gres=gpu:1", "-t", "5", "--wrap", "true")
    wait_for(lambda: lab.job(waiting).get("forecastNodes"), 30, "a forecast")
    text = page(lab, alice, f"/job/{waiting}")
    assert fact(text, "State") == "PENDING"
    assert fact(text, "Nodes") is None, text
    planned = fact(text, "Planned nodes") or ""
    assert planned.startswith(lab.job(waiting)["forecastNodes"]), text
    _, out, _ = run(lab, users, alice, "scontrol", "show", "job", str(waiting))
    assert "\n   NodeList=\n   SchedNodeList=node" in out  # as Slurm 22.05's
    run(lab, users, alice, "scancel", str(hog), str(waiting))
    lab.wait_state(waiting, "CANCELLED")


def test_sstat_of_a_job_that_is_not_there_says_so_once_and_fails(
    lab: LocalCluster, users: Users
) -> None:
    code, out, err = run(lab, users, users.alice, "sstat", "-j", "999999")
    assert (code, out, err) == (1, "", "sstat: error: couldn't get steps for job 999999\n")
    code, out, err = run(lab, users, users.alice, "sstat", "-j", "999999", "-o", "JobID,MaxRSS")
    assert (code, out) == (1, "") and err.count("couldn't get steps") == 1


def test_the_owner_and_an_operator_get_the_batch_script_back_nobody_else(
    lab: LocalCluster, users: Users
) -> None:
    """Slurm 21.08's ``scontrol write batch_script JOBID [FILE|-]`` and ``sacct -B``:
    the script as submitted, while the job runs and after it ended, to its owner and
    operators; another user gets Slurm's "Invalid user id" and nothing of it."""
    alice, bob, op = users.alice, users.bob, users.op
    home = users.home(alice)
    (home / "kept.sh").write_text(SCRIPT)
    job = submit_as(lab, users, alice, str(home / "kept.sh"))
    lab.wait_state(job, "RUNNING")
    for state in ("running", "ended"):
        code, out, err = run(lab, users, alice, "scontrol", "write", "batch_script", str(job), "-")
        assert (code, out) == (0, SCRIPT), (state, err)
        code, out, err = run(lab, users, op, "scontrol", "write", "batch_script", str(job), "-")
        assert (code, out) == (0, SCRIPT), (state, err)
        code, out, err = run(lab, users, alice, "sacct", "--batch-script", "-j", str(job))
        assert code == 0, err
        assert out == f"Batch Script for {job}\n{'-' * 80}\n{SCRIPT}", out
        for argv in (
            ("scontrol", "write", "batch_script", str(job), "-"),
            ("sacct", "-B", "-j", str(job)),
        ):
            code, out, err = run(lab, users, bob, *argv)
            assert code == 1 and "Invalid user id" in err, (argv, out, err)
            assert "owner-only" not in out + err, argv
        if state == "running":
            run(lab, users, alice, "scancel", str(job))
            lab.wait_state(job, "CANCELLED")
    # to slurm-JOBID.sh in her working directory, or a file she names, as herself
    code, out, err = run(lab, users, alice, "scontrol", "write", "batch_script", str(job))
    assert (code, out) == (0, f"batch script for job {job} written to slurm-{job}.sh\n"), err
    written = home / f"slurm-{job}.sh"
    assert written.read_text() == SCRIPT and written.stat().st_uid == alice.pw_uid
    code, out, err = run(
        lab, users, alice, "scontrol", "write", "batch_script", str(job), "/etc/passwd"
    )
    assert code == 1 and "failed to write batch script to /etc/passwd" in err, err
    code, _, err = run(lab, users, alice, "scontrol", "write", "batch_script", "999999", "-")
    assert (code, err) == (1, "job script retrieval failed: Invalid job id specified\n")
    code, _, err = run(lab, users, alice, "scontrol", "write", "batch_script", "5\r\nx", "-")
    assert code == 1 and "Invalid job id specified" in err, err
    code, _, err = run(lab, users, alice, "sacct", "-B")
    assert code == 1 and "--batch-script requires --jobs" in err, err


def test_a_requeued_jobs_page_shows_its_ettr_beside_this_runs_elapsed(
    lab: LocalCluster, users: Users
) -> None:
    """Elapsed is the current run's (Slurm resets a requeued job's start); the job
    page shows the requeue and the effective training time from the first start, as
    sacct's ETTR has it."""
    alice = users.alice
    job = submit_as(lab, users, alice, "--requeue", "--wrap", "sleep 300")
    lab.wait_state(job, "RUNNING")
    code, _, err = run(lab, users, alice, "scontrol", "requeue", str(job))
    assert code == 0, err
    wait_for(
        lambda: lab.job(job).get("restartCount") == 1 and lab.state(job) == "RUNNING", 60, "run 1"
    )
    text = page(lab, alice, f"/job/{job}")
    assert fact(text, "Restarts") == "1"
    shown = fact(text, "Effective training time") or ""
    assert re.match(
        r"ETTR \d+\.\d% over \S+ since the first start; lost \S+, restarts \S+ \(1 interruption",
        shown,
    ), text
    code, out, _ = run(
        lab, users, alice, "sacct", "-j", str(job), "-X", "-n", "-P", "-o", "ETTR,Interruptions"
    )
    assert out.strip().endswith("%|1"), out
    run(lab, users, alice, "scancel", str(job))
    lab.wait_state(job, "CANCELLED")
