"""sacct output from QueryAccounting replies (proto3 JSON), as Slurm prints it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.sacct import (
    build_request,
    field_spec,
    format_accounting,
    help_fields,
    parse_when,
    window,
)
from corral.errors import InvalidOption

NOW = 1796212800.0  # 2026-12-02T12:00:00Z
MIDNIGHT = NOW - 12 * 3600


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def job(job_id: int, state: str, **kw: Any) -> dict[str, Any]:
    spec = {"name": kw.pop("name", f"job{job_id}"), "workDir": "/home/alice"}
    spec.update(kw.pop("spec", {}))
    out: dict[str, Any] = {
        "jobId": str(job_id),
        "spec": spec,
        "user": "alice",
        "uid": 1000,
        "gid": 1000,
        "state": f"JOB_STATE_{state}",
        "partition": "debug",
        "timeLimitS": "3600",
        "submitTime": NOW - 600,
        "eligibleTime": NOW - 600,
        "numNodes": 1,
        "numTasks": 1,
        "numCpus": 1,
        "cluster": "corral",
    }
    if state != "PENDING":
        out.update(startTime=NOW - 300, nodelist="node01", batchHost="node01", reason="None")
        out["allocations"] = [{"node": "node01", "cpus": 1}]
    if state not in ("PENDING", "RUNNING"):
        out["endTime"] = NOW - 180
    out.update(kw)
    return out


def reply(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"jobs": list(jobs), "now": NOW}


JOBS = reply(
    job(1, "COMPLETED", name="quick"),
    job(2, "FAILED", name="failer", exitCode=3, reason="NonZeroExitCode"),
    job(3, "CANCELLED", name="tocancel", exitSignal=15),
    job(4, "PENDING", name="waiting", reason="Resources", numCpus=16),
    job(5, "RUNNING", name="sleeper"),
)


def test_default_columns_with_batch_steps() -> None:
    assert format_accounting(JOBS) == (
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n"
        "------------ ---------- ---------- ---------- ---------- ---------- -------- \n"
        "1                 quick      debug                     1  COMPLETED      0:0 \n"
        "1.batch           batch                                1  COMPLETED      0:0 \n"
        "2                failer      debug                     1     FAILED      3:0 \n"
        "2.batch           batch                                1     FAILED      3:0 \n"
        "3              tocancel      debug                     1 CANCELLED+      0:0 \n"
        "3.batch           batch                                1  CANCELLED     0:15 \n"
        "4               waiting      debug                    16    PENDING      0:0 \n"
        "5               sleeper      debug                     1    RUNNING      0:0 \n"
        "5.batch           batch                                1    RUNNING      0:0 \n"
    )


def test_parsable_no_header_is_what_tools_parse() -> None:
    out = format_accounting(JOBS, "JobID,State,ExitCode", header=False, parsable="P")
    assert out.splitlines() == [
        "1|COMPLETED|0:0",
        "1.batch|COMPLETED|0:0",
        "2|FAILED|3:0",
        "2.batch|FAILED|3:0",
        "3|CANCELLED by 1000|0:0",
        "3.batch|CANCELLED|0:15",
        "4|PENDING|0:0",
        "5|RUNNING|0:0",
        "5.batch|RUNNING|0:0",
    ]


def test_allocations_only_and_trailing_delimiter() -> None:
    out = format_accounting(JOBS, "jobid,state", steps=False, parsable="p")
    assert out.splitlines() == [
        "JobID|State|",
        "1|COMPLETED|",
        "2|FAILED|",
        "3|CANCELLED by 1000|",
        "4|PENDING|",
        "5|RUNNING|",
    ]


FIELDS = (
    "JobID,JobIDRaw,JobName,Partition,Account,User,UID,State,ExitCode,Elapsed,ElapsedRaw,"
    "Start,End,Submit,Timelimit,NNodes,NCPUS,AllocCPUS,NodeList,AllocTRES,ReqTRES,Reason,"
    "WorkDir,Comment,Priority"
)


def test_every_required_field() -> None:
    gpu_job = job(
        7,
        "RUNNING",
        numCpus=4,
        memMb="2048",
        numGpus=2,
        priority=100,
        account="physics",
        spec={"comment": "sweep"},
        allocations=[{"node": "node01", "cpus": 4, "memMb": "2048", "gpuIndices": [0, 1]}],
    )
    out = format_accounting(reply(gpu_job, job(4, "PENDING")), FIELDS, parsable="P")
    assert out.splitlines() == [
        FIELDS.replace(",", "|"),
        "7|7|job7|debug|physics|alice|1000|RUNNING|0:0|00:05:00|300|2026-12-02T11:55:00|"
        "Unknown|2026-12-02T11:50:00|01:00:00|1|4|4|node01|billing=4,cpu=4,gres/gpu=2,mem=2G,"
        "node=1|billing=4,cpu=4,gres/gpu=2,mem=2G,node=1|None|/home/alice|sweep|100",
        "7.batch|7.batch|batch||physics|||RUNNING|0:0|00:05:00|300|2026-12-02T11:55:00|"
        "Unknown|2026-12-02T11:55:00||1|4|4|node01|cpu=4,gres/gpu=2,mem=2G,node=1|||||",
        "4|4|job4|debug||alice|1000|PENDING|0:0|00:00:00|0|Unknown|Unknown|"
        "2026-12-02T11:50:00|01:00:00|1|1|1|None assigned||billing=1,cpu=1,node=1|None|"
        "/home/alice||0",
    ]


def test_unlimited_and_finished_times() -> None:
    out = format_accounting(
        reply(job(1, "COMPLETED", timeLimitS="-1")),
        "JobID,Elapsed,End,Timelimit,TimelimitRaw",
        steps=False,
        parsable="P",
        header=False,
    )
    assert out == "1|00:02:00|2026-12-02T11:57:00|UNLIMITED|UNLIMITED\n"


def test_custom_widths() -> None:
    out = format_accounting(reply(job(1, "COMPLETED")), "jobid%20,jobname%-15,state%5", steps=False)
    assert out.splitlines() == [
        "               JobID JobName         State ",
        "-------------------- --------------- ----- ",
        "                   1 job1            COMP+ ",
    ]


def test_no_jobs_prints_the_header_only() -> None:
    assert format_accounting(reply(), "JobID,State").count("\n") == 2


def test_fields_from_options() -> None:
    assert field_spec({}) == "jobid,jobname,partition,account,alloccpus,state,exitcode"
    assert field_spec({"brief": True}) == "jobid,state,exitcode"
    assert field_spec({"format": "JobID"}) == "JobID"
    with pytest.raises(InvalidOption, match="mutually exclusive"):
        field_spec({"format": "JobID", "long": True})


def test_helpformat_lists_fields_four_to_a_line() -> None:
    lines = help_fields().splitlines()
    assert (
        lines[0]
        == "Account             AdminComment        AllocCPUS           AllocNodes         "
    )
    assert lines[-1] == "WorkDir            "


def test_fields_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SACCT_FORMAT", "jobid,state")
    assert field_spec({}) == "jobid,state"


def test_default_window_is_today_and_states_mean_now() -> None:
    assert window({}, NOW) == (MIDNIGHT, 0.0)
    assert window({"jobs": "5"}, NOW) == (0.0, 0.0)
    assert window({"state": "CD"}, NOW) == (NOW, NOW)
    assert window({"state": "CD", "jobs": "5"}, NOW) == (0.0, 0.0)
    assert window({"starttime": "now-2hours", "endtime": "now"}, NOW) == (NOW - 7200, NOW)
    with pytest.raises(InvalidOption, match="is after end time"):
        window({"starttime": "now", "endtime": "now-1hour"}, NOW)


def test_users_default_to_the_caller_unless_root_or_asked() -> None:
    request = build_request({}, "alice", 1000, NOW)
    assert request == {"filter": {"users": ["alice"]}, "startAfter": MIDNIGHT}
    assert build_request({}, "root", 0, NOW)["filter"] == {}
    assert build_request({"allusers": True}, "alice", 1000, NOW)["filter"] == {}
    assert build_request({"jobs": "5,6"}, "alice", 1000, NOW) == {"filter": {"jobIds": ["5", "6"]}}
    request = build_request({"user": "bob", "state": "CD,F"}, "alice", 1000, NOW)
    assert request["filter"] == {
        "users": ["bob"],
        "states": ["JOB_STATE_COMPLETED", "JOB_STATE_FAILED"],
    }


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("now", NOW),
        ("now-30minutes", NOW - 1800),
        ("now+1day", NOW + 86400),
        ("midnight", MIDNIGHT),
        ("08:30", MIDNIGHT + 8.5 * 3600),
        ("13:00", MIDNIGHT + 13 * 3600 - 86400),  # later today means yesterday's
        ("2026-12-01", MIDNIGHT - 86400),
        ("2026-12-01T06:00:00", MIDNIGHT - 18 * 3600),
        ("12/01", MIDNIGHT - 86400),
        ("120126", MIDNIGHT - 86400),
    ],
)
def test_start_and_end_times(text: str, when: float) -> None:
    assert parse_when(text, NOW) == when


def test_bad_time() -> None:
    with pytest.raises(InvalidOption, match="Invalid time specification: soon"):
        parse_when("soon", NOW)


def test_duplicates_show_each_run_of_a_requeued_job() -> None:
    first = job(7, "REQUEUED", startTime=NOW - 900, endTime=NOW - 600)
    first.update(nodelist="node02", batchHost="node02")
    last = job(7, "COMPLETED", restartCount=1)
    out = format_accounting(
        reply(first, last), "JobID,State,Start,End,NodeList,Restarts", parsable="P"
    )
    assert out.splitlines() == [
        "JobID|State|Start|End|NodeList|Restarts",
        "7|REQUEUED|2026-12-02T11:45:00|2026-12-02T11:50:00|node02|0",
        "7.batch|REQUEUED|2026-12-02T11:45:00|2026-12-02T11:50:00|node02|",
        "7|COMPLETED|2026-12-02T11:55:00|2026-12-02T11:57:00|node01|1",
        "7.batch|COMPLETED|2026-12-02T11:55:00|2026-12-02T11:57:00|node01|",
    ]


def test_duplicates_flag_asks_for_earlier_runs() -> None:
    opts = {"duplicates": True, "jobs": "7"}
    assert build_request(opts, "alice", 1000, NOW)["duplicates"] is True
    assert "duplicates" not in build_request({"jobs": "7"}, "alice", 1000, NOW)


def test_accounts_partitions_and_names_are_filtered_by_the_store() -> None:
    opts = {"accounts": "physics,bio", "partition": "gpu", "name": "train", "allusers": True}
    assert build_request(opts, "alice", 1000, NOW)["filter"] == {
        "accounts": ["physics", "bio"],
        "partitions": ["gpu"],
        "names": ["train"],
    }


def test_repeated_list_options_add_up_as_slurms() -> None:
    # submitit asks `sacct -o JobID,State,NodeList --parsable2 -j 4 -j 7`: both jobs
    from client.options import OptionParser
    from client.sacct import OPTIONS

    opts, _ = OptionParser("sacct", OPTIONS).parse(["-j", "4", "-j", "7,9", "-u", "a", "-u", "b"])
    assert opts["jobs"] == "4,7,9"
    assert opts["user"] == "a,b"
    request = build_request(opts, "me", 1000, time.time())
    assert request["filter"]["jobIds"] == ["4", "7", "9"]


def test_derived_exit_code_and_qos() -> None:
    # DerivedExitCode: the highest srun step exit code (the script's own is ExitCode);
    # QOS: the job's effective QOS (normal when it asked for none)
    steps = [
        {"stepId": 0, "state": "JOB_STATE_COMPLETED", "exitCode": 0},
        {"stepId": 1, "state": "JOB_STATE_FAILED", "exitCode": 5},
        {"stepId": 2, "state": "JOB_STATE_CANCELLED", "exitSignal": 9},
    ]
    jobs = reply(
        job(1, "COMPLETED", steps=steps, qos="high"),
        job(2, "FAILED", exitCode=3),
        job(3, "PENDING", spec={"qos": "low"}),
    )
    out = format_accounting(jobs, "JobID,ExitCode,DerivedExitCode,QOS", steps=False, parsable="P")
    assert out.splitlines()[1:] == ["1|0:0|5:0|high", "2|3:0|0:0|normal", "3|0:0|0:0|low"]
