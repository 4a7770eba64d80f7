"""squeue output from GetJobs replies (proto3 JSON), byte for byte as Slurm prints it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.squeue import ACTIVE_STATES, Row, build_filter, format_jobs, sort_rows
from corral.errors import InvalidOption

NOW = 1796212800.0  # 2026-12-02T12:00:00Z

HEADER = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"


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
    out.update(kw)
    return out


def running(job_id: int, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "reason": "None",
        "startTime": NOW - 125,
        "nodelist": "node01",
        "batchHost": "node01",
    }
    base.update(kw)
    return job(job_id, "RUNNING", **base)


def reply(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"jobs": list(jobs), "now": NOW}


def test_default_columns_and_header_are_slurms() -> None:
    out = format_jobs(
        reply(
            job(3, "PENDING", reason="JobHeldUser", hold="HOLD_USER", name="held"),
            running(7, name="training-run", numNodes=2, nodelist="node[01-02]"),
            job(9, "PENDING", reason="Resources"),
        )
    )
    assert out == (
        HEADER
        + "                 3     debug     held    alice PD       0:00      1 (JobHeldUser)\n"
        + "                 9     debug     job9    alice PD       0:00      1 (Resources)\n"
        + "                 7     debug training    alice  R       2:05      2 node[01-02]\n"
    )


def test_noheader_custom_format_is_what_scripts_parse() -> None:
    out = format_jobs(
        reply(running(7), job(9, "PENDING", reason="Priority")),
        "%i %T %t %R",
        header=False,
    )
    assert out == "9 PENDING PD (Priority)\n7 RUNNING R node01\n"


def test_pending_job_without_reason_shows_none() -> None:
    out = format_jobs(reply(job(4, "PENDING")), "%i|%r|%R", header=False)
    assert out == "4|None|(None)\n"


def test_default_filter_hides_finished_jobs_and_all_shows_them() -> None:
    jobs = reply(
        running(1),
        job(2, "COMPLETED", startTime=NOW - 60, endTime=NOW - 30, nodelist="node02"),
        job(3, "FAILED", startTime=NOW - 60, endTime=NOW - 59, reason="NonZeroExitCode"),
        job(4, "CANCELLED", endTime=NOW - 10, reason="None"),
    )
    assert format_jobs(jobs, "%i", header=False) == "1\n"
    out = format_jobs(jobs, "%i %t %M %R", header=False, states=None)
    # sorted by state code: CA, CD, F, R
    assert out == "4 CA 0:00 \n2 CD 0:30 node02\n3 F 0:01 (NonZeroExitCode)\n1 R 2:05 node01\n"


def test_time_columns() -> None:
    jobs = reply(
        running(1, timeLimitS="5400"),
        running(2, timeLimitS="-1"),
        job(3, "PENDING", timeLimitS="93840"),
    )
    out = format_jobs(jobs, "%i|%M|%l|%L|%S|%e|%V", header=False, sort="i")
    assert out == (
        "1|2:05|1:30:00|1:27:55|2026-12-02T11:57:55|2026-12-02T13:27:55|2026-12-02T11:50:00\n"
        "2|2:05|UNLIMITED|UNLIMITED|2026-12-02T11:57:55|NONE|2026-12-02T11:50:00\n"
        "3|0:00|1-02:04:00|1-02:04:00|N/A|N/A|2026-12-02T11:50:00\n"
    )


def test_long_format_has_the_date_line_and_whole_time_limits() -> None:
    out = format_jobs(
        reply(job(5, "PENDING", timeLimitS="93840", reason="Resources")),
        "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R",
        long_date=True,
    )
    assert out.splitlines() == [
        "Wed Dec 02 12:00:00 2026",
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES "
        "NODELIST(REASON)",
        "                 5     debug     job5    alice  PENDING       0:00 1-02:04:00      1 "
        "(Resources)",
    ]


def test_resource_columns() -> None:
    jobs = reply(
        running(
            1,
            numCpus=8,
            numNodes=2,
            nodelist="node[01-02]",
            spec={"gpusPerNode": 2, "memPerNodeMb": "2048", "cpusPerTask": 4},
        ),
        running(2, spec={"gpusPerNode": 1, "gpuType": "h100", "nice": 10}),
        running(3, spec={"gpus": 4}, account="physics"),
    )
    out = format_jobs(jobs, "%i|%C|%D|%b|%m|%c|%N|%a|%y|%Z|%P|%u|%j", header=False, sort="i")
    assert out == (
        "1|8|2|gres:gpu:2|2G|4|node[01-02]|(null)|0|/home/alice|debug|alice|job1\n"
        "2|1|1|gres:gpu:h100:1|0|1|node01|(null)|10|/home/alice|debug|alice|job2\n"
        "3|1|1|N/A|0|1|node01|physics|0|/home/alice|debug|alice|job3\n"
    )


def test_widths_cut_and_pad() -> None:
    out = format_jobs(reply(running(1234567, name="a-very-long-name")), "%5i|%.5j|%5j|%.3T")
    assert out == "JOBID| NAME|NAME |STA\n12345|a-ver|a-ver|RUN\n"
    out = format_jobs(reply(running(1234567)), "%.5i|%.12j|", header=False)
    assert out == "1234567|  job1234567|\n"  # a right-justified job id is never cut


def test_header_names() -> None:
    out = format_jobs(reply(), "%i|%j|%u|%T|%t|%M|%l|%D|%R|%P|%C|%b|%N|%r|%V|%S|%e|%a|%q|%Q|%L")
    assert out == (
        "JOBID|NAME|USER|STATE|ST|TIME|TIME_LIMIT|NODES|NODELIST(REASON)|PARTITION|CPUS|"
        "TRES_PER_NODE|NODELIST|REASON|SUBMIT_TIME|START_TIME|END_TIME|ACCOUNT|QOS|PRIORITY|"
        "TIME_LEFT\n"
    )


def test_default_sort_is_partition_then_state_then_priority() -> None:
    jobs = reply(
        job(1, "PENDING", partition="gpu", priority=5),
        job(2, "PENDING", partition="debug", priority=1),
        running(3, partition="debug", priority=9),
        job(4, "PENDING", partition="debug", priority=7),
    )
    assert format_jobs(jobs, "%i", header=False) == "4\n2\n3\n1\n"
    assert format_jobs(jobs, "%i", header=False, sort="-i") == "4\n3\n2\n1\n"
    assert format_jobs(jobs, "%i", header=False, sort="P-i") == "4\n3\n2\n1\n"
    assert format_jobs(jobs, "%i", header=False, sort="-P,i") == "1\n2\n3\n4\n"


def test_bad_sort_and_format_letters() -> None:
    with pytest.raises(InvalidOption, match="Invalid sort specification: %"):
        sort_rows([Row(job(1, "PENDING"), NOW)], "%")
    with pytest.raises(InvalidOption, match="Invalid job format specification: !"):
        format_jobs(reply(), "%i %!")


def test_all_format_lists_every_supported_letter() -> None:
    header = format_jobs(reply(), "%all").rstrip("\n").split("|")
    assert header[0] == "ACCOUNT" and header[-1] == "WORK_DIR"
    assert "TRES_PER_NODE" in header and "NODELIST(REASON)" in header


def test_filter_from_options() -> None:
    flt, states = build_filter({"jobs": "5,6", "user": "alice,bob", "states": "pd,r"}, "me")
    assert flt == {
        "jobIds": ["5", "6"],
        "users": ["alice", "bob"],
        "states": ["JOB_STATE_PENDING", "JOB_STATE_RUNNING"],
    }
    assert states == {"PENDING", "RUNNING"}
    flt, states = build_filter({"me": True, "partition": "gpu", "name": "a,b"}, "carol")
    assert flt["users"] == ["carol"] and flt["partitions"] == ["gpu"] and flt["names"] == ["a", "b"]
    assert flt["states"] == ["JOB_STATE_COMPLETING", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"]
    assert states == ACTIVE_STATES
    flt, states = build_filter({"states": "all"}, "me")
    assert "states" not in flt and states is None


def test_long_format_takes_slurm_2205_field_names(capsys: pytest.CaptureFixture[str]) -> None:
    # squeue(1) 22.05 -O names, matched without case; headers and values as Slurm's
    # (checked against a real 22.05: `exit_code` is the raw wait status)
    from client.squeue import long_format

    jobs = reply(
        job(
            7,
            "PENDING",
            hold="HOLD_USER",
            spec={
                "gpus": 4,
                "gpusPerNode": 2,
                "gpusPerTask": 1,
                "cpusPerTask": 2,
                "ntasks": 3,
                "noRequeue": True,
            },
            numTasks=3,
        ),
        running(8, exitCode=3, restartCount=2),
    )
    fields = (
        "JobID:4,tres-per-node:14,TRES-PER-JOB:13,tres_per_task:14,cpus-per-task:14,"
        "NumTasks:6,exit_code:10,Requeue:8,RestartCnt:14,PendingTime:13,TresPerNode:.14|"
    )
    out = format_jobs(jobs, long_format(fields), sort="i")
    assert out.splitlines() == [
        "JOBITRES_PER_NODE TRES_PER_JOB TRES_PER_TASK CPUS_PER_TASK TASKS EXIT_CODE REQUEUE "
        "RESTART_COUNT PENDING_TIME  TRES_PER_NODE|",
        "7   gres:gpu:2    gres:gpu:4   gres:gpu:1    2             3     0         0       "
        f"0             {'600':<13}{'gres:gpu:2':>14}|",
        "8   N/A           N/A          N/A           1             1     768       1       "
        f"2             {'475':<13}{'N/A':>14}|",
    ]
    # an unknown field is reported and left out, as Slurm 22.05 does; none left: an error
    assert [spec.letter for spec in long_format("JobID,Nodes")] == ["i"]
    assert "Invalid job format specification: Nodes" in capsys.readouterr().err
    with pytest.raises(InvalidOption, match="Invalid job format specification"):
        long_format("Nodes")
