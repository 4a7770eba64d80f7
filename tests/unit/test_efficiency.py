"""seff's figures (corral/efficiency.py), shared by the seff command and the web page."""

from __future__ import annotations

import pytest

from corral.efficiency import clock, efficiency, job_efficiency, kbytes, lines
from corral.wire import corral_pb2 as pb


def test_cpu_and_memory_as_seff_computes_them() -> None:
    # 4 CPUs for 4 minutes, 10 minutes of CPU; --mem=4G on one node, 1 GiB used
    eff = efficiency(
        elapsed_s=240,
        cpus=4,
        nodes=1,
        cpu_used_s=600,
        max_rss_kb=1024 * 1024,
        mem_per_node_mb=4096,
    )
    assert eff.core_walltime_s == 960
    assert eff.cpu_pct == pytest.approx(62.5)
    assert eff.mem_requested_mb == 4096
    assert eff.mem_pct == pytest.approx(25.0)
    assert lines(eff) == [
        "Nodes: 1",
        "Cores per node: 4",
        "CPU Utilized: 00:10:00",
        "CPU Efficiency: 62.50% of 00:16:00 core-walltime",
        "Job Wall-clock time: 00:04:00",
        "Memory Utilized: 1.00 GB",
        "Memory Efficiency: 25.00% of 4.00 GB (4.00 GB/node)",
    ]


def test_memory_per_cpu_counts_every_cpu() -> None:
    eff = efficiency(elapsed_s=10, cpus=8, nodes=2, cpu_used_s=0, max_rss_kb=0, mem_per_cpu_mb=512)
    assert (eff.mem_requested_mb, eff.mem_per, eff.mem_per_mb) == (4096, "core", 512)
    assert "Memory Efficiency: 0.00% of 4.00 GB (512.00 MB/core)" in lines(eff)


def test_a_job_that_never_ran_has_no_efficiency() -> None:
    job = pb.Job(job_id=1, state=pb.JOB_STATE_PENDING, num_cpus=1, num_nodes=1)
    eff = job_efficiency(job, "PENDING", now=1000.0)
    assert eff.elapsed_s == 0 and eff.cpu_pct is None
    assert lines(eff, pending=True) == ["Cores: 1"]


def test_a_running_job_counts_to_now_and_warns() -> None:
    job = pb.Job(
        job_id=2,
        state=pb.JOB_STATE_RUNNING,
        start_time=100.0,
        num_cpus=2,
        num_nodes=1,
        num_gpus=2,
        mem_mb=2048,
        usage=pb.JobUsage(
            user_cpu_s=50, gpu_util_mean=40.0, gpu_util_max=90.0, gpu_mem_max_mb=20480, samples=3
        ),
    )
    eff = job_efficiency(job, "RUNNING", now=200.0, gpu_memory_mb=81920)
    assert eff.elapsed_s == 100 and eff.cpu_pct == pytest.approx(25.0)
    assert eff.mem_requested_mb == 2048  # the allocation stands in for an absent --mem
    assert eff.gpu_util_mean_pct == 40.0 and eff.gpu_mem_pct == pytest.approx(25.0)
    text = lines(eff)
    assert "GPU Utilization: 40.00% mean, 90.00% peak over 2 GPUs" in text
    assert text[-1] == "WARNING: Efficiency statistics may be misleading for RUNNING jobs."


def test_seff_units() -> None:
    assert clock(90061) == "1-01:01:01"
    assert kbytes(0) == "0.00 MB"
    assert kbytes(512) == "512.00 KB"
    assert kbytes(1536 * 1024) == "1.50 GB"


def test_seff_and_the_web_page_read_the_same_inputs_the_same_way() -> None:
    # one reading of a job's inputs (corral/efficiency.job_efficiency) for both: seff's
    # JSON view and ctld's record; a running job counts to now even where its record
    # holds an end time (the expected one), and its live usage replaces the record's
    from google.protobuf import json_format

    from client.views.job import Job
    from client.views.usage import Usage

    job = pb.Job(
        job_id=5, state=pb.JOB_STATE_RUNNING, start_time=100.0, end_time=900.0,
        num_cpus=0, num_nodes=0, mem_mb=1024,
        usage=pb.JobUsage(user_cpu_s=10, system_cpu_s=10, max_rss_kb=512 * 1024),
    )  # fmt: skip
    live = pb.JobUsage(user_cpu_s=30, system_cpu_s=10, max_rss_kb=256 * 1024)
    view = Job(json_format.MessageToDict(job))  # type: ignore[arg-type]
    from_view = job_efficiency(
        view,
        view.state_name,
        now=200.0,
        usage=Usage(json_format.MessageToDict(live)),  # type: ignore[arg-type]
    )
    from_record = job_efficiency(job, "RUNNING", now=200.0, usage=live)
    assert from_view == from_record
    assert from_record.elapsed_s == 100 and from_record.cpus == 1 and from_record.nodes == 1
    assert from_record.cpu_pct == pytest.approx(40.0) and from_record.mem_pct == 25.0
