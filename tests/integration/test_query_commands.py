"""squeue, sinfo, sacct and scontrol against real ctld and noded processes.

One cluster serves the module; every test cancels what it leaves running, and every
wait polls with a deadline.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from corral.testing import LocalCluster, wait_for
from corral.testing.cluster import ClusterFactory
from tests.conftest import pg_schema, pg_url_or_skip

BIN = pathlib.Path(sys.executable).parent
HEADER = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cluster(
    request: pytest.FixtureRequest, module_cluster_factory: ClusterFactory
) -> Iterator[LocalCluster]:
    """One cluster per store backend: every query below runs on both."""
    if request.param == "sqlite":
        yield module_cluster_factory(nodes=2)
        return
    with pg_schema(pg_url_or_skip()) as url:
        c = module_cluster_factory(nodes=2, store_url=url)
        try:
            yield c
        finally:
            c.stop()  # before its schema goes


def run(
    cluster: LocalCluster, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env={**cluster.env(), **(env or {})},
        cwd=cluster.state_dir,
        capture_output=True,
        text=True,
        timeout=30,
    )


def out(cluster: LocalCluster, *argv: str) -> str:
    proc = run(cluster, *argv)
    assert proc.returncode == 0, (argv, proc.stderr)
    return proc.stdout


def submit(cluster: LocalCluster, script: str, **spec: Any) -> str:
    work = cluster.state_dir / "work"
    work.mkdir(exist_ok=True)
    full = {"name": "q", "script": script, "workDir": str(work), **spec}
    return str(cluster.client().submit_job({"spec": full})["jobId"])


def state(cluster: LocalCluster, job_id: str) -> str:
    jobs = cluster.client().get_jobs({"filter": {"jobIds": [job_id]}})["jobs"]
    return str(jobs[0]["state"]).removeprefix("JOB_STATE_")


def test_sinfo_shows_idle_nodes(cluster: LocalCluster) -> None:
    idle = "debug*       up 1-00:00:00      2   idle node[01-02]\n"
    wait_for(lambda: out(cluster, "sinfo", "-h") == idle, what="both nodes idle")
    assert out(cluster, "sinfo").startswith("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n")
    assert out(cluster, "sinfo", "-h", "-N", "-o", "%N %t %c") == "node01 idle 16\nnode02 idle 16\n"
    node = out(cluster, "scontrol", "show", "node", "node01")
    assert node.startswith("NodeName=node01 ") and "\n   State=IDLE " in node
    part = out(cluster, "scontrol", "show", "partition", "debug")
    assert part.startswith("PartitionName=debug\n") and " Default=YES " in part


def test_squeue_shows_running_job_in_slurms_columns(cluster: LocalCluster) -> None:
    job_id = submit(cluster, "#!/bin/sh\nsleep 60\n", name="sleeper")
    try:
        line = wait_for(
            lambda: out(cluster, "squeue", "-h", "-j", job_id, "-o", "%i %t %j %N"),
            what="the job to show",
        )
        wait_for(
            lambda: (
                out(cluster, "squeue", "-h", "-j", job_id, "-o", "%i %t %j %N")
                in (f"{job_id} R sleeper node01\n", f"{job_id} R sleeper node02\n")
            ),
            what=f"job {job_id} running (last: {line!r})",
        )
        listing = out(cluster, "squeue")
        assert listing.startswith(HEADER)
        assert f"{job_id:>18}     debug  sleeper     root  R " in listing
        assert out(cluster, "squeue", "-h", "-j", job_id, "-t", "R", "-o", "%i") == f"{job_id}\n"
        assert out(cluster, "squeue", "-h", "-j", job_id, "-t", "PD,CD", "-o", "%i") == ""
        assert " mix " in out(cluster, "sinfo", "-h")
    finally:
        cluster.client().cancel_jobs({"filter": {"jobIds": [job_id]}})
    wait_for(lambda: state(cluster, job_id) == "CANCELLED", what="the cancel")
    assert out(cluster, "squeue", "-h", "-j", job_id) == ""
    sacct = out(cluster, "sacct", "-j", job_id, "-P", "-n", "-o", "JobID,State")
    assert sacct.splitlines()[0] == f"{job_id}|CANCELLED by 0"


def test_squeue_unknown_job(cluster: LocalCluster) -> None:
    proc = run(cluster, "squeue", "-j", "424242")
    assert proc.returncode == 1
    assert proc.stderr == "slurm_load_jobs error: Invalid job id specified\n"
    proc = run(cluster, "scontrol", "show", "job", "424242")
    assert proc.returncode == 1
    assert proc.stderr == "slurm_load_jobs error: Invalid job id specified\n"


def test_hold_and_release_change_the_reason(cluster: LocalCluster) -> None:
    job_id = submit(cluster, "#!/bin/sh\ntrue\n", name="held", hold=True)

    def reason() -> str:
        return out(cluster, "squeue", "-h", "-j", job_id, "-o", "%R")

    assert reason() == "(JobHeldUser)\n"
    assert out(cluster, "scontrol", "hold", job_id) == ""
    assert reason() == "(JobHeldAdmin)\n"  # root's hold is an operator's
    assert out(cluster, "scontrol", "uhold", job_id) == ""
    assert reason() == "(JobHeldUser)\n"
    proc = run(cluster, "scontrol", "hold", "424242")
    assert proc.returncode == 1
    assert proc.stderr == (
        "Invalid job id specified for job 424242\nslurm_suspend error: Invalid job id specified\n"
    )
    assert out(cluster, "scontrol", "release", job_id) == ""
    wait_for(lambda: state(cluster, job_id) == "COMPLETED", what="the released job to run")
    shown = out(cluster, "scontrol", "show", "job", job_id)
    assert shown.startswith(f"JobId={job_id} JobName=held\n   UserId=root(0) GroupId=")
    assert "\n   JobState=COMPLETED Reason=None Dependency=(null)\n" in shown
    assert shown.endswith("\n   Power=\n   \n\n")
    one = out(cluster, "scontrol", "-o", "show", "job", job_id)
    assert one.count("\n") == 1 and " JobState=COMPLETED " in one


def test_sacct_after_jobs_end(cluster: LocalCluster) -> None:
    ok = submit(cluster, "#!/bin/sh\ntrue\n", name="fine")
    bad = submit(cluster, "#!/bin/sh\nexit 3\n", name="broken")
    expected = [
        f"{ok}|COMPLETED|0:0",
        f"{ok}.batch|COMPLETED|0:0",
        f"{bad}|FAILED|3:0",
        f"{bad}.batch|FAILED|3:0",
    ]

    def listing() -> list[str]:
        text = out(cluster, "sacct", "-j", f"{ok},{bad}", "-P", "-n", "-o", "JobID,State,ExitCode")
        return text.splitlines()

    wait_for(lambda: listing() == expected, what=f"sacct to show {expected}")
    alloc = out(cluster, "sacct", "-X", "-j", f"{ok},{bad}", "-P", "-n", "-o", "jobid,state")
    assert alloc == f"{ok}|COMPLETED\n{bad}|FAILED\n"
    default = out(cluster, "sacct", "-j", ok)
    assert default.splitlines()[:2] == [
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- ",
    ]
    assert f"{ok:<12}       fine      debug" in default
    today = out(cluster, "sacct", "-X", "-n", "-P", "-o", "JobID")  # root: every user's
    assert {ok, bad} <= set(today.split())
    window = ["-X", "-n", "-S", "now-1days", "-E", "now", "-j", f"{ok},{bad}"]
    assert out(cluster, "sacct", *window, "-s", "CD", "-p", "-o", "JobID,State") == (
        f"{ok}|COMPLETED|\n"
    )
    assert out(cluster, "sacct", *window, "-P", "--delimiter=,", "-o", "JobID,JobName") == (
        f"{ok},fine\n{bad},broken\n"
    )
    assert out(cluster, "sacct", *window, "-o", "JobID%8,JobName%-8,ExitCode%5") == (
        f"{ok:>8} fine       0:0 \n{bad:>8} broken     3:0 \n"
    )
    assert out(cluster, "sacct", *window, "-A", "nosuchaccount") == ""
    # page by page (one job a page here) prints what one answer would
    paged = run(
        cluster, "sacct", "-j", f"{ok},{bad}", "-o", "JobID,State", env={"CORRAL_SACCT_PAGE": "1"}
    )
    whole = out(cluster, "sacct", "-j", f"{ok},{bad}", "-o", "JobID,State")
    assert paged.returncode == 0 and paged.stdout == whole
    for bad_page in ("x", "0", "-3"):  # not a page size: the default, never a crash
        odd = run(
            cluster,
            "sacct",
            "-j",
            f"{ok},{bad}",
            "-o",
            "JobID,State",
            env={"CORRAL_SACCT_PAGE": bad_page},
        )
        assert odd.returncode == 0 and odd.stdout == whole, odd.stderr
    proc = run(cluster, "sacct", "-o", "JobID,NoSuchField")
    assert proc.returncode == 1 and 'Invalid field requested: "NoSuchField"' in proc.stderr
