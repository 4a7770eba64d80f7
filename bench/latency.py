"""Phase 3, submit-to-start latency of a trivial job on an idle cluster.

One ``#!/bin/sh\\ntrue`` job at a time over gRPC; after each submit returns, GetJobs
(by id) is polled until the job has finished, and ctld's recorded ``start_time`` and
``end_time`` are compared with the moment the submit returned (same host, same
clock). The next job is submitted only once the previous one ended.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import (
    ANCHORS,
    SLURM,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    grpc_metadata,
    log,
    ms,
    phase_main,
    summary,
    trivial_spec,
)

POLL_S = 0.002


async def measure(cluster: BenchCluster, n: int) -> dict[str, list[float]]:
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    md = grpc_metadata(cluster)
    finished = {pb.JOB_STATE_COMPLETED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED}
    out: dict[str, list[float]] = {
        "submit_rpc": [],
        "to_start": [],
        "to_end": [],
        "ctld_submit_to_start": [],
        "run": [],
        "observed_done": [],
    }
    failed = 0
    request = pb.SubmitJobRequest(spec=trivial_spec(cluster.work_dir, name="latency"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        await stub.GetClusterInfo(pb.GetClusterInfoRequest(), metadata=md)
        for _ in range(n):
            await asyncio.sleep(0.05)  # let the previous job's aftermath settle
            t0 = time.time()
            reply = await stub.SubmitJob(request, metadata=md)
            returned = time.time()
            get = pb.GetJobsRequest(filter=pb.JobFilter(job_ids=[reply.job_id]))
            while True:
                jobs = (await stub.GetJobs(get, metadata=md)).jobs
                if jobs and jobs[0].state in finished:
                    job = jobs[0]
                    break
                if time.time() - returned > 60:
                    raise TimeoutError(f"job {reply.job_id} did not finish in 60 s")
                await asyncio.sleep(POLL_S)
            if job.state != pb.JOB_STATE_COMPLETED:
                failed += 1
            out["submit_rpc"].append(returned - t0)
            out["to_start"].append(job.start_time - returned)
            out["to_end"].append(job.end_time - returned)
            out["ctld_submit_to_start"].append(job.start_time - job.submit_time)
            out["run"].append(job.end_time - job.start_time)
            out["observed_done"].append(time.time() - returned)
    out["failed"] = [float(failed)]
    return out


def run(quick: bool = False) -> PhaseResult:
    n = 10 if quick else 50
    result = PhaseResult(
        "latency", {"jobs": n, "cluster": "2 nodes x 16 CPUs", "poll": f"{POLL_S * 1000:.0f} ms"}
    )
    with bench_cluster("latency") as cluster:
        log(f"latency: {n} jobs, one at a time")
        samples = asyncio.run(measure(cluster, n))
    table = Table(
        f"Submit-to-start latency, trivial job, idle cluster ({n} jobs, one at a time)",
        ["interval", "p50", "p95", "max", "reference"],
    )
    rows: list[tuple[str, str, str]] = [
        ("submit returned -> startTime", "to_start", f"{SLURM}: p50 {ANCHORS['latency_p50']}"),
        ("submit returned -> endTime", "to_end", "n/a"),
        ("ctld submitTime -> startTime", "ctld_submit_to_start", "n/a"),
        ("startTime -> endTime (job run, noded)", "run", "n/a"),
        ("SubmitJob call itself (gRPC)", "submit_rpc", "n/a"),
        ("submit returned -> client sees it finished", "observed_done", "n/a"),
    ]
    data: dict[str, Any] = {}
    for label, key, ref in rows:
        s = summary(samples[key])
        data[key] = {**s, "samples_s": samples[key]}
        table.add(label, ms(s["median"]), ms(s["p95"]), ms(s["max"]), ref)
    failed = int(samples["failed"][0])
    table.notes.append(f"jobs not COMPLETED: {failed}")
    table.notes.append(
        "startTime is stamped by ctld when the scheduling pass allocates the job (before its "
        "RUNNING row is committed and before noded hears of it); endTime is noded's exit time. "
        "A negative figure: the scheduling pass that the submit woke ran before the reply "
        "reached the client"
    )
    result.data = data
    result.tables.append(table)
    return result


if __name__ == "__main__":
    phase_main(run)
