"""The scheduler through the real daemons: backfill around a waiting 2-node job,
forecasts in squeue --start, reasons, sprio/sshare, dependencies, updates."""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for


def submit(cmd: Commands, *args: str) -> str:
    return cmd("sbatch", "--parsable", *args).stdout.strip()


@pytest.fixture
def limits_only(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> tuple[LocalCluster, Commands]:
    """A cluster whose scheduler backfills by time limits only (scheduler.predict off)."""
    c = cluster_factory(nodes=2, gpus_per_node=8, extra_config="\n[scheduler]\npredict = false\n")
    work = tmp_path / "work"
    work.mkdir()
    return c, Commands(c, work)


def test_short_jobs_backfill_around_a_waiting_two_node_job(
    limits_only: tuple[LocalCluster, Commands],
) -> None:
    _cluster, cmd = limits_only
    # node01's GPUs are busy for at most 8 s: a 2-node, 8-GPU job must wait for it
    first = submit(cmd, "--gres=gpu:8", "-t", "0:08", "--wrap", "sleep 5")
    cmd.wait_state(first, "RUNNING")
    big = submit(cmd, "-N2", "--gres=gpu:8", "-t", "0:20", "--wrap", "true")
    wait_for(lambda: cmd.job(big).get("reason") == "Resources", 30, "the big job to wait")
    forecast = float(cmd.job(big)["expectedStart"])
    started_first = float(cmd.job(first)["startTime"])
    assert abs(forecast - (started_first + 8)) < 1.5  # when node01's job hits its limit
    # ends before the forecast: backfilled onto node02 at once
    short = submit(cmd, "--gres=gpu:8", "-t", "0:02", "--wrap", "true")
    # would still hold node02 at the forecast: must not start, however idle node02 is
    long = submit(cmd, "--gres=gpu:8", "-t", "5:00", "--wrap", "true")
    cmd.wait_state(short, "RUNNING", "COMPLETED")
    wait_for(lambda: cmd.job(long).get("reason") == "Priority", 30, "the long job's reason")
    assert cmd.job(long)["state"] == "JOB_STATE_PENDING"

    start = cmd("squeue", "--start", "-h", "-o", "%i %S %Y %R").stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in start}
    assert rows[big][1] == "node[01-02]" and rows[big][2] == "(Resources)"
    assert rows[big][0] == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(forecast)))
    assert rows[long][2] == "(Priority)"

    why = cmd("corral", "why", big).stdout
    assert "is pending: the resources it asks for are busy [Resources]" in why
    assert f"job {first} of " in why and "Expected start:" in why

    prio = cmd("sprio", "-h", "-o", "%i %Y %A %F %J").stdout.split("\n")
    assert {line.split()[0] for line in prio if line} == {big, long}
    sprio_big = next(line.split() for line in prio if line.startswith(big))
    assert int(sprio_big[1]) == int(cmd.job(big)["priority"]) > 1
    assert 0 < int(sprio_big[3]) <= 10000  # the fair-share part, from root's usage

    job = cmd.wait_state(big, "COMPLETED", timeout=60)
    assert float(job["startTime"]) <= forecast + 3  # started at (or before) its forecast
    assert float(cmd.job(short)["endTime"]) <= float(job["startTime"])


def test_forecasts_use_the_users_run_time_history(cluster: LocalCluster, cmd: Commands) -> None:
    # two 3-second runs under a 1-minute limit: the next such job is predicted at ~3 s
    for _ in range(2):
        cmd.wait_state(submit(cmd, "-t", "1:00", "--wrap", "sleep 3"), "COMPLETED", timeout=60)
    first = submit(cmd, "--gres=gpu:8", "-t", "1:00", "--wrap", "sleep 3")
    cmd.wait_state(first, "RUNNING")
    started = float(cmd.job(first)["startTime"])
    big = submit(cmd, "-N2", "--gres=gpu:8", "-t", "0:20", "--wrap", "true")
    wait_for(lambda: cmd.job(big).get("expectedStart"), 30, "the big job's forecast")
    forecast = float(cmd.job(big)["expectedStart"])
    # by its limit the plan would say started + 60; the prediction says about started + 3
    assert forecast < started + 20
    start = cmd("squeue", "--start", "-h", "-j", big, "-o", "%i %S").stdout.split()
    assert start[1] == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(forecast)))
    job = cmd.wait_state(big, "COMPLETED", timeout=60)
    assert float(job["startTime"]) < started + 30  # it did not wait for the limit either


def test_dependencies_hold_until_met_and_never_satisfied(
    cluster: LocalCluster, cmd: Commands
) -> None:
    first = submit(cmd, "--wrap", "sleep 1; exit 3")
    ok = submit(cmd, f"--dependency=afterok:{first}", "--wrap", "true")
    notok = submit(cmd, f"--dependency=afternotok:{first}", "--wrap", "true")
    # a --begin time too: Slurm 22.05 names the dependency first
    later = submit(cmd, f"--dependency=afterok:{first}", "--begin=now+3600", "--wrap", "true")
    wait_for(lambda: cmd.job(ok).get("reason") == "Dependency", 30, "Dependency reason")
    assert cmd("squeue", "-h", "-o", "%r", "-j", later).stdout == "Dependency\n"
    cmd("scancel", later)
    cmd.wait_state(first, "FAILED")
    cmd.wait_state(notok, "COMPLETED")
    wait_for(
        lambda: cmd.job(ok).get("reason") == "DependencyNeverSatisfied",
        30,
        "DependencyNeverSatisfied",
    )
    assert cmd.job(ok)["state"] == "JOB_STATE_PENDING"
    # sacct says what squeue says (the pass's reason is ctld's, in memory)
    shown = cmd("sacct", "-n", "-X", "-P", "-o", "JobID,State,Reason", "-j", ok).stdout
    assert shown == f"{ok}|PENDING|DependencyNeverSatisfied\n"
    assert cmd("squeue", "-h", "-o", "%r", "-j", ok).stdout == "DependencyNeverSatisfied\n"
    bad = cmd("sbatch", "--dependency=afterok:999999", "--wrap", "true", check=False)
    assert bad.returncode == 1 and "Job dependency problem" in bad.stderr


def test_why_names_array_tasks_reservations_and_how_it_plans(
    cluster: LocalCluster, cmd: Commands
) -> None:
    # issue 22: `corral why --help` helps; `corral why N_T` answers about task T of
    # array N; the words say the plan is by predicted run times (the default); a
    # reservation that holds the nodes is named; a change is offered only if sooner
    helped = cmd("corral", "why", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: corral why")
    held = submit(cmd, "-H", "--array=1-3", "-J", "arr", "--wrap", "true")
    second = cmd.cluster.client().get_jobs({"filter": {"arrayTasks": [f"{held}_2"]}})["jobs"]
    why = cmd("corral", "why", f"{held}_2").stdout
    assert why.startswith(f"Job {second[0]['jobId']} (arr) is pending: you held it"), why
    assert second[0]["jobId"] != held
    missing = cmd("corral", "why", f"{held}_9", check=False)
    assert missing.returncode == 1 and "Invalid job id specified" in missing.stderr
    cmd("scancel", held)

    from corral.identity import current_identity

    cmd(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=maint",
        "StartTime=now+600",
        "Duration=10:00",
        "Nodes=node[01-02]",
        f"Users={current_identity().user}",
        "Flags=MAINT",
    )
    try:
        # 30 minutes cannot end before the reservation begins in 10: it waits for its end
        big = submit(cmd, "-N2", "--gres=gpu:8", "-t", "30:00", "--wrap", "true")
        wait_for(lambda: cmd.job(big).get("expectedStart"), 30, "the job's forecast")
        why = cmd("corral", "why", big).stdout
        assert "Reservation maint (maintenance) holds node[01-02] from " in why, why
        assert "without it, it would start sooner" in why
        assert "planned with the run times predicted" in why
        assert "whole time limit" not in why
        assert "  -t 0:07:30: at once" in why  # short enough to end before it begins
        assert "  -N 1:" not in why  # one node is as blocked as two: not sooner
        cmd("scancel", big)
    finally:
        cmd("scontrol", "delete", "ReservationName=maint")


def _web_view(cluster: LocalCluster, cmd: Commands, path: str) -> str:
    """A page of ctld's web page as a signed-in root sees it (the HTML of its view)."""
    url = cmd("corral", "web-login", "--url-only").stdout.strip()
    token = url.split("#token=", 1)[1]
    base = f"http://{cluster.http_address}"
    signin = urllib.request.Request(
        base + "/login",
        data=json.dumps({"token": token}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(signin, timeout=10) as resp:
        session = json.loads(resp.read())["session"]
    view = urllib.request.Request(base + "/view" + path)
    view.add_header("Authorization", f"Bearer {session}")
    with urllib.request.urlopen(view, timeout=10) as resp:
        return str(json.loads(resp.read())["html"])


def test_a_reservation_in_the_way_is_the_reason_in_every_view(
    cluster: LocalCluster, cmd: Commands
) -> None:
    # issue 36: a job held off an idle cluster by a maintenance reservation showed
    # Resources (squeue, the web queue, corral why's first line); Slurm 22.05 says
    # "ReqNodeNotAvail, Reserved for maintenance", and "ReqNodeNotAvail, May be
    # reserved for other job" for another reservation. Its nodes read as sinfo's
    # maint everywhere (scontrol IDLE+MAINTENANCE+RESERVED, corral why NODE, the web
    # page's counts), and a reservation that began is said to hold them since then
    from corral.identity import current_identity

    me = current_identity().user
    create = ("scontrol", "create", "reservation", "StartTime=now", "Duration=60")
    cmd(*create, "ReservationName=maint", "Nodes=node[01-02]", f"Users={me}", "Flags=MAINT")
    job = submit(cmd, "-t", "10:00", "--wrap", "true")
    maint = "ReqNodeNotAvail, Reserved for maintenance"

    def squeue(fmt: str) -> str:
        return str(cmd("squeue", "-h", "-j", job, "-o", fmt).stdout.strip())

    wait_for(lambda: squeue("%r") == maint, 30, "squeue's reason")
    assert squeue("%R") == f"({maint})"
    assert cmd("sacct", "-n", "-P", "-X", "-j", job, "-o", "Reason").stdout.strip() == maint
    shown = cmd("scontrol", "show", "job", job).stdout
    assert "Reason=ReqNodeNotAvail,_Reserved_for_maintenance " in shown, shown
    words = "a maintenance reservation holds the nodes it needs for its time limit"
    # once a second has gone by since the reservation began, it is past
    wait_for(lambda: " s ago) until " in cmd("corral", "why", job).stdout, 10, "a past start")
    why = cmd("corral", "why", job).stdout
    assert why.startswith(f"Job {job} (wrap) is pending: {words} [{maint}].\n"), why
    assert "Reservation maint (maintenance) holds node[01-02] since " in why, why
    assert "in 0 s" not in why and "busy" not in why
    sinfo = cmd("sinfo", "-h", "-N", "-o", "%N %t %T").stdout.splitlines()
    assert sinfo == ["node01 maint maint", "node02 maint maint"], sinfo
    assert "State=IDLE+MAINTENANCE+RESERVED " in cmd("scontrol", "show", "node", "node01").stdout
    node_why = cmd("corral", "why", "node01").stdout
    assert node_why.startswith(
        "Node node01 is IDLE+MAINTENANCE+RESERVED.\n"
        "It is in maintenance reservation maint: only that reservation's jobs start there.\n"
    ), node_why
    queue = _web_view(cluster, cmd, "/queue")
    assert words in queue and maint in queue and "resources it asks for are busy" not in queue
    nodes = _web_view(cluster, cmd, "/")
    assert '<span class="badge maint">MAINT</span> 2</li>' in nodes, nodes
    assert 'class="badge idle"' not in nodes

    cmd("scontrol", "hold", job)  # (it would start between the two reservations)
    cmd("scontrol", "delete", "ReservationName=maint")
    cmd(*create, "ReservationName=other", "Nodes=node[01-02]", f"Users={me}")
    cmd("scontrol", "release", job)
    other = "ReqNodeNotAvail, May be reserved for other job"
    wait_for(lambda: squeue("%r") == other, 30, "squeue's reason for another reservation")
    assert cmd("sinfo", "-h", "-N", "-o", "%t").stdout.split() == ["resv", "resv"]
    cmd("scancel", job)
    cmd("scontrol", "delete", "ReservationName=other")


def test_an_inactive_partition_holds_its_queue_with_slurms_reason(
    cluster: LocalCluster, cmd: Commands
) -> None:
    # Slurm 22.05: PartitionInactive for an INACTIVE partition (corral said
    # PartitionDown), PartitionDown for a DOWN one; a DRAIN one runs its queue
    queued = submit(cmd, "-H", "--wrap", "true")
    config = cluster.config_path.read_text()
    for state, reason in (("INACTIVE", "PartitionInactive"), ("DOWN", "PartitionDown")):
        cluster.config_path.write_text(
            config.replace('max_time = "1-00:00:00"', f'max_time = "1-00:00:00"\nstate = "{state}"')
        )
        cmd("scontrol", "reconfigure")
        cmd("scontrol", "release", queued)
        wait_for(lambda: cmd.job(queued).get("reason") == reason, 30, reason)  # noqa: B023
        assert cmd("squeue", "-h", "-o", "%r", "-j", queued).stdout == f"{reason}\n"
        cmd("scontrol", "hold", queued)
    cluster.config_path.write_text(
        config.replace('max_time = "1-00:00:00"', 'max_time = "1-00:00:00"\nstate = "DRAIN"')
    )
    cmd("scontrol", "reconfigure")
    cmd("scontrol", "release", queued)
    cmd.wait_state(queued, "COMPLETED")


def test_update_job_and_shares(cluster: LocalCluster, cmd: Commands) -> None:
    held = submit(cmd, "-H", "-t", "10", "--wrap", "true")
    cmd("scontrol", "update", "job", held, "TimeLimit=5", "Nice=10")
    job = cmd.job(held)
    assert job["timeLimitS"] == "300" and job["spec"]["nice"] == 10
    assert job["events"][-1]["event"] == "updated"
    bad = cmd("scontrol", "update", "JobId=" + held, "Partition=nope", check=False)
    assert bad.returncode == 1 and "Invalid partition name specified" in bad.stderr
    shares = cmd("sshare", "-a", "-P").stdout.splitlines()
    assert shares[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|"
    assert any(line.startswith(" root|root|1|") for line in shares)


def test_metrics_endpoint(cluster: LocalCluster, cmd: Commands) -> None:

    running = submit(cmd, "--gres=gpu:3", "--wrap", "sleep 30")
    held = submit(cmd, "-H", "--wrap", "true")
    cmd.wait_state(running, "RUNNING")
    body = cluster.scrape()
    assert 'corral_jobs{state="RUNNING"} 1.0' in body
    assert 'corral_jobs_pending{reason="JobHeldUser"} 1.0' in body
    assert 'corral_gpus{partition="debug",use="allocated"} 3.0' in body
    assert 'corral_gpus{partition="debug",use="idle"} 13.0' in body
    assert 'corral_nodes{state="MIXED"} 1.0' in body
    assert "corral_job_starts_total 1.0" in body and "corral_sched_pass_seconds" in body
    cmd("scancel", running, held)


def test_advance_reservation_keeps_its_node(cluster: LocalCluster, cmd: Commands) -> None:
    from corral.errors import PermissionDenied
    from corral.identity import current_identity

    out = cmd(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=maint",
        "StartTime=now+4",
        "Duration=1:00",
        "Nodes=node01",
        f"Users={current_identity().user}",
    ).stdout
    assert out == "Reservation created: maint\n"
    shown = cmd("scontrol", "show", "reservation", "maint").stdout
    assert "Nodes=node01 NodeCnt=1" in shown and "Duration=00:01:00" in shown
    clash = cmd(
        "scontrol",
        "create",
        "res",
        "StartTime=now",
        "Duration=5",
        "Nodes=node01",
        "Users=x",
        check=False,
    )
    assert clash.returncode == 1 and "node01 is in reservation maint" in clash.stderr
    mallory = cluster.tcp_client(token=cluster.token("nobody"))  # a real non-operator
    try:
        mallory.delete_reservation({"name": "maint"})
        raise AssertionError("a non-operator deleted a reservation")
    except PermissionDenied:
        pass

    fits_before = submit(cmd, "-w", "node01", "-t", "0:01", "--wrap", "true")
    overlaps = submit(cmd, "-w", "node01", "-t", "0:30", "--wrap", "true")
    inside = submit(cmd, "--reservation=maint", "-t", "0:10", "--wrap", "true")
    cmd.wait_state(fits_before, "RUNNING", "COMPLETED")
    wait_for(lambda: cmd.job(inside).get("reason") == "Reservation", 30, "Reservation reason")
    resv_end = float(cmd.job(overlaps).get("expectedStart", 0))
    assert resv_end >= float(cmd.job(inside)["submitTime"]) + 55  # after the window
    job = cmd.wait_state(inside, "COMPLETED", timeout=60)
    assert job["nodelist"] == "node01"
    assert cmd("sinfo", "-h", "-N", "-n", "node01", "-o", "%t").stdout.strip() == "resv"
    assert "State=IDLE+RESERVED" in cmd("scontrol", "show", "node", "node01").stdout
    assert cmd.job(overlaps)["state"] == "JOB_STATE_PENDING"

    # durable: a restarted ctld still has it
    cluster.kill_process("ctld")
    cluster.start_ctld()
    assert "ReservationName=maint" in cmd("scontrol", "show", "res").stdout
    cmd("scontrol", "delete", "ReservationName=maint")
    assert cmd("scontrol", "show", "res").stdout == "No reservations in the system\n"
    bad = cmd("sbatch", "--reservation=maint", "--wrap", "true", check=False)
    assert bad.returncode == 1 and "Requested reservation is invalid" in bad.stderr
    cmd.wait_state(overlaps, "COMPLETED", timeout=60)  # the node is free for it now


def test_job_array_with_throttle(cluster: LocalCluster, cmd: Commands) -> None:
    first = submit(
        cmd,
        "--array=0-8:2%2",
        "-o",
        "a-%A_%a.out",
        "--wrap",
        "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT "
        "$SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP; sleep 1",
    )
    client = cluster.client()
    most = 0

    def tasks() -> list[dict[str, object]]:
        return client.get_jobs({"filter": {"jobIds": [first]}})["jobs"]

    def all_done() -> bool:
        nonlocal most
        now = tasks()
        most = max(most, sum(t["state"] == "JOB_STATE_RUNNING" for t in now))
        return all(t["state"] == "JOB_STATE_COMPLETED" for t in now)

    wait_for(lambda: len(tasks()) == 5, 10, "five tasks")
    queue = cmd("squeue", "-h", "-o", "%i %r", "-j", first).stdout
    assert f"{first}_[" in queue or "_8" in queue  # the pending rest, collapsed
    wait_for(all_done, 60, "every task to complete")
    assert most <= 2  # the %2 throttle held
    for task in (0, 2, 4, 6, 8):
        out = (cmd.cwd / f"a-{first}_{task}.out").read_text().split()
        assert out == [first, str(task), "5", "0", "8", "2"]
    ids = cmd("sacct", "-n", "-X", "-P", "-o", "JobID", "-j", first).stdout.split()
    assert f"{first}_0" in ids

    held = submit(cmd, "-H", "--array=1-3", "--wrap", "true")
    cmd("scancel", f"{held}_2")
    states = {
        cmd.job(int(held) + i)["arrayTaskId"]: cmd.job(int(held) + i)["state"] for i in range(3)
    }
    assert states == {1: "JOB_STATE_PENDING", 2: "JOB_STATE_CANCELLED", 3: "JOB_STATE_PENDING"}
    assert cmd("squeue", "-h", "-o", "%i", "-j", held).stdout.split() == [f"{held}_[1,3]"]
    cmd("scancel", held)
    assert all(cmd.job(int(held) + i)["state"] == "JOB_STATE_CANCELLED" for i in range(3))
