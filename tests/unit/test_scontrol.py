"""scontrol show records from replies (proto3 JSON), in Slurm 22.05's key=value layout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.scontrol import (
    complete_state,
    expand_path,
    format_jobs,
    format_nodes,
    format_partitions,
    hold_messages,
)

NOW = 1796212800.0  # 2026-12-02T12:00:00Z


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


RUNNING = {
    "jobId": "7",
    "spec": {
        "name": "train",
        "workDir": "/home/alice/run",
        "partitions": ["debug"],
        "cpusPerTask": 4,
        "memPerNodeMb": "2048",
        "gpusPerNode": 2,
        "submitHost": "login1",
        "stdoutPattern": "%x-%j.out",
    },
    "user": "alice",
    "uid": 1000,
    "gid": 1000,
    "state": "JOB_STATE_RUNNING",
    "reason": "None",
    "partition": "debug",
    "timeLimitS": "5400",
    "submitTime": NOW - 600,
    "eligibleTime": NOW - 600,
    "startTime": NOW - 300,
    "allocations": [{"node": "node01", "cpus": 4, "memMb": "2048", "gpuIndices": [0, 1]}],
    "nodelist": "node01",
    "numNodes": 1,
    "numTasks": 1,
    "numCpus": 4,
    "memMb": "2048",
    "numGpus": 2,
    "priority": 100,
    "cluster": "corral",
    "batchHost": "node01",
}

HELD = {
    "jobId": "8",
    "spec": {"name": "held", "workDir": "/tmp", "hold": True},
    "user": "alice",
    "uid": 1000,
    "gid": 1000,
    "state": "JOB_STATE_PENDING",
    "reason": "JobHeldUser",
    "hold": "HOLD_USER",
    "partition": "debug",
    "timeLimitS": "-1",
    "submitTime": NOW - 60,
    "eligibleTime": NOW - 60,
    "numNodes": 1,
    "numTasks": 1,
    "numCpus": 1,
}


def test_running_job_record_is_slurms_layout() -> None:
    out = format_jobs({"jobs": [RUNNING], "now": NOW})
    group = out.splitlines()[1].split("GroupId=")[1].split(" ")[0]
    assert out == (
        "JobId=7 JobName=train\n"
        f"   UserId=alice(1000) GroupId={group} MCS_label=N/A\n"
        "   Priority=100 Nice=0 Account=(null) QOS=(null)\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n"
        "   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
        "   RunTime=00:05:00 TimeLimit=01:30:00 TimeMin=N/A\n"
        "   SubmitTime=2026-12-02T11:50:00 EligibleTime=2026-12-02T11:50:00\n"
        "   AccrueTime=2026-12-02T11:50:00\n"
        "   StartTime=2026-12-02T11:55:00 EndTime=2026-12-02T13:25:00 Deadline=N/A\n"
        "   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-02T11:55:00 Scheduler=Main\n"
        "   Partition=debug AllocNode:Sid=login1:0\n"
        "   ReqNodeList=(null) ExcNodeList=(null)\n"
        "   NodeList=node01\n"
        "   BatchHost=node01\n"
        "   NumNodes=1 NumCPUs=4 NumTasks=1 CPUs/Task=4 ReqB:S:C:T=0:0:*:*\n"
        "   TRES=cpu=4,mem=2G,node=1,billing=4,gres/gpu=2\n"
        "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n"
        "   MinCPUsNode=4 MinMemoryNode=2G MinTmpDiskNode=0\n"
        "   Features=(null) DelayBoot=00:00:00\n"
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n"
        "   Command=(null)\n"
        "   WorkDir=/home/alice/run\n"
        "   StdErr=/home/alice/run/train-7.out\n"
        "   StdIn=/dev/null\n"
        "   StdOut=/home/alice/run/train-7.out\n"
        "   Power=\n"
        "   TresPerNode=gres:gpu:2\n"
        "   \n"
        "\n"
    )
    assert group.endswith("(1000)")


def test_held_job_has_no_eligible_time_and_no_batch_host() -> None:
    lines = format_jobs({"jobs": [HELD], "now": NOW}).splitlines()
    assert "   JobState=PENDING Reason=JobHeldUser Dependency=(null)" in lines
    assert "   RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A" in lines
    assert "   SubmitTime=2026-12-02T11:59:00 EligibleTime=Unknown" in lines
    assert "   StartTime=Unknown EndTime=Unknown Deadline=N/A" in lines
    assert "   NodeList=" in lines
    assert not any("BatchHost" in line for line in lines)


def test_finished_job_and_one_liner() -> None:
    done = {
        **RUNNING,
        "state": "JOB_STATE_FAILED",
        "reason": "NonZeroExitCode",
        "exitCode": 3,
        "endTime": NOW - 100,
    }
    out = format_jobs({"jobs": [done, HELD], "now": NOW}, one_liner=True)
    first, second = out.splitlines()
    assert out.count("\n") == 2
    assert first.startswith("JobId=7 JobName=train UserId=alice(1000) ")
    assert " JobState=FAILED Reason=NonZeroExitCode " in first
    assert " ExitCode=3:0 RunTime=00:03:20 " in first
    assert " EndTime=2026-12-02T11:58:20 " in first
    assert first.endswith(" Power= TresPerNode=gres:gpu:2 ")
    assert second.startswith("JobId=8 JobName=held ")


def test_no_jobs() -> None:
    assert format_jobs({"now": NOW}) == "No jobs in the system\n"


def test_output_paths_expand_patterns() -> None:
    job = {"jobId": "9", "user": "bob", "batchHost": "n1", "spec": {"name": "x", "workDir": "/w"}}
    assert expand_path("slurm-%j.out", job) == "/w/slurm-9.out"
    assert expand_path("/abs/%u-%x-%N-%4j-%%.log", job) == "/abs/bob-x-n1-0009-%.log"


NODE = {
    "name": "node01",
    "address": "127.0.0.2:4000",
    "state": "NODE_STATE_MIXED",
    "resources": {
        "cpus": 16,
        "memoryMb": "65536",
        "gpus": [{"index": i} for i in range(8)],
        "sockets": 1,
        "coresPerSocket": 16,
        "threadsPerCore": 1,
    },
    "allocCpus": 4,
    "allocMemMb": "2048",
    "allocGpus": 2,
    "partitions": ["debug"],
    "lastHeartbeat": NOW - 1,
    "bootTime": NOW - 3600,
    "version": "0.1.0",
    "os": "Linux 6.1",
    "jobIds": ["7"],
    "gpuType": "h100",
}


def test_node_record() -> None:
    assert format_nodes({"nodes": [NODE], "now": NOW}) == (
        "NodeName=node01 Arch=x86_64 CoresPerSocket=16 \n"
        "   CPUAlloc=4 CPUEfctv=16 CPUTot=16 CPULoad=N/A\n"
        "   AvailableFeatures=(null)\n"
        "   ActiveFeatures=(null)\n"
        "   Gres=gpu:h100:8\n"
        "   NodeAddr=127.0.0.2 NodeHostName=node01 Version=0.1.0\n"
        "   OS=Linux 6.1 \n"
        "   RealMemory=65536 AllocMem=2048 FreeMem=N/A Sockets=1 Boards=1\n"
        "   State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
        "   Partitions=debug \n"
        "   BootTime=2026-12-02T11:00:00 SlurmdStartTime=2026-12-02T11:00:00\n"
        "   LastBusyTime=2026-12-02T11:59:59\n"
        "   CfgTRES=cpu=16,mem=64G,billing=16,gres/gpu=8\n"
        "   AllocTRES=cpu=4,mem=2G,gres/gpu=2\n"
        "   CapWatts=n/a\n"
        "   CurrentWatts=0 AveWatts=0\n"
        "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
        "\n"
    )


def test_node_reason_and_one_liner() -> None:
    down = {**NODE, "state": "NODE_STATE_DOWN", "reason": "Not responding", "reasonTime": NOW}
    out = format_nodes({"nodes": [down]}, one_liner=True)
    assert out.count("\n") == 1
    assert " State=DOWN+NOT_RESPONDING " in out
    assert out.endswith(" Reason=Not responding [root@2026-12-02T12:00:00]\n")
    assert "CoresPerSocket=16  CPUAlloc=4" in out  # Slurm's double space, kept


@pytest.mark.parametrize(
    ("state", "alloc", "shown"),
    [
        ("IDLE", 0, "IDLE"),
        ("ALLOCATED", 16, "ALLOCATED"),
        ("DRAIN", 0, "IDLE+DRAIN"),
        ("DRAINING", 4, "MIXED+DRAIN"),
        ("DRAINING", 16, "ALLOCATED+DRAIN"),
        ("UNKNOWN", 0, "UNKNOWN+NOT_RESPONDING"),
    ],
)
def test_node_states(state: str, alloc: int, shown: str) -> None:
    node = {**NODE, "state": f"NODE_STATE_{state}", "allocCpus": alloc}
    assert complete_state(node) == shown


def test_partition_record() -> None:
    part = {
        "name": "debug",
        "nodes": "node[01-02]",
        "isDefault": True,
        "state": "UP",
        "maxTimeS": "86400",
        "defaultTimeS": "-1",
        "totalNodes": 2,
        "totalCpus": 32,
        "totalGpus": 16,
        "priorityTier": 1,
    }
    assert format_partitions([part]) == (
        "PartitionName=debug\n"
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n"
        "   AllocNodes=ALL Default=YES QoS=N/A\n"
        "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO\n"
        "   MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED\n"
        "   Nodes=node[01-02]\n"
        "   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO\n"
        "   OverTimeLimit=NONE PreemptMode=OFF\n"
        "   State=UP TotalCPUs=32 TotalNodes=2 SelectTypeParameters=NONE\n"
        "   JobDefaults=(null)\n"
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n"
        "   TRES=cpu=32,node=2,billing=32,gres/gpu=16\n"
        "\n"
    )
    one = format_partitions([{**part, "isDefault": False, "maxNodes": 4}], one_liner=True)
    assert one.startswith("PartitionName=debug AllowGroups=ALL ")
    assert " Default=NO " in one and " MaxNodes=4 " in one and one.endswith("gres/gpu=16\n")


def test_hold_errors_are_reported_per_job_then_once() -> None:
    outcomes: list[dict[str, Any]] = [
        {"jobId": "5", "ok": True},
        {"jobId": "98", "error": "InvalidJobId", "message": "Invalid job id specified"},
        {"jobId": "99", "error": "InvalidJobId", "message": "Invalid job id specified"},
    ]
    assert hold_messages(outcomes) == [
        "Invalid job id specified for job 98",
        "Invalid job id specified for job 99",
        "slurm_suspend error: Invalid job id specified",
    ]
    assert hold_messages(outcomes[:1]) == []
